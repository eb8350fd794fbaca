//! The harness of the tasks that drive servers as separate processes (`peers`,
//! `promql-bench`, `server-soak`): starting a server on a free loopback port and stopping
//! it ([`process`]), plain HTTP requests to it ([`http`]), and what `/proc` and the data
//! directory say about it ([`procfs`], [`disk`]). Nothing here knows a protocol or a
//! system; the tasks build their commands, bodies and URLs themselves.

pub(crate) mod disk;
pub(crate) mod http;
pub(crate) mod process;
pub(crate) mod procfs;

pub(crate) use disk::{dir_bytes, wait_stable};
pub(crate) use http::{agent, get_text, post_text};
pub(crate) use process::{
    Process, ensure_installed, free_port, package_version, tidemark_server_bin,
};
pub(crate) use procfs::{loadavg, status_field_kib, status_kib, vm_hwm_kib};
