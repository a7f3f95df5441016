//! TLS for the gateway's HTTP clients: trusted roots and client certificates.
