//! Egress proxies: which proxy (if any) a request to a target goes through.
