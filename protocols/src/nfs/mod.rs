//! ONC RPC, portmap, MOUNT and NFS XDR codecs (RFC 5531, 1833, 1813, 8881, 7862).
