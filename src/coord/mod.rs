//! Coordination across replicas: the etcd client the coordination layer builds on.

pub mod etcd;
