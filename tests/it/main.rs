//! The integration tests, one binary (each file below was its own binary; one link of the crate instead of
//! twenty). Run one group with `cargo test --test it cuda_stub::`, one test with its full path.

mod abi;
mod apt;
mod boundary;
mod c_abi;
mod cli_convert;
mod cli_devices;
mod cli_help;
mod cli_inspect;
mod cli_put;
mod cli_rules;
mod cli_shard;
mod cli_tokens;
mod common;
mod cpp;
mod cuda_review;
mod cuda_stub;
mod cuda_truth;
mod engine_path;
mod example_host_first;
mod file_catalogue;
mod file_corpus;
mod file_engine;
mod file_props;
mod file_sets;
mod file_sparse;
mod file_support;
mod forksafe;
mod gather;
mod gather_feed;
mod gds;
mod go;
mod gpu_harness;
mod handoff;
mod header;
mod header_api;
mod install;
mod licenses;
mod load_bulk;
mod load_job;
mod mpi;
/// abi/hostfirst.map's rules, shared with build.rs.
#[path = "../../abi/nodes.rs"]
#[allow(dead_code)]
mod nodes;
/// The page-cache policy (issue 45, point 1).
#[cfg(target_os = "linux")]
mod page_cache;
mod place_cpu;
mod place_cuda;
mod place_rules;
mod python_abi;
mod readme_example;
mod release;
/// Remote sources: s3://, http(s):// (issue 46).
mod remote;
/// Remote sources over S3 (moto's server; issue 46).
mod remote_s3;
mod shard;
mod tokens;
mod valgrind;
mod windows;
mod writer;
mod writer_corpus;
