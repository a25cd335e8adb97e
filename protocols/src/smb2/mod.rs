//! SMB2/3 wire codec (MS-SMB2).
