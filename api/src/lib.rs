//! Admin API.
