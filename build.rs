//! Compiles Armada's gRPC contract under `proto/` (feature `grpc`) with protox, a protobuf
//! compiler in Rust: no `protoc` is needed. The Rust types and the tonic services go to
//! `OUT_DIR/api.rs`; the descriptor set (which `src/grpc/k8s.rs` reads to turn pod specs into
//! Kubernetes JSON) to `OUT_DIR/descriptors.bin`. It also picks how the executable is linked
//! (position-dependent on Linux with glibc, see `link_position_dependent`).

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=proto");
    link_position_dependent();
    if std::env::var_os("CARGO_FEATURE_GRPC").is_none() {
        return;
    }
    if let Err(e) = compile() {
        eprintln!("error: compiling proto/: {e}");
        std::process::exit(1);
    }
}

/// Links the `convoy` executable position-dependent on Linux with glibc, as Go links Nomad and
/// Armada. A position-independent executable of this size relocates about 1 MiB of read-only
/// data at every start, copying each of its pages into the process: that was half the CPU of a
/// `convoy submit` (docs/benchmarks.md). Shared libraries, heap, stack and mmap stay randomized.
/// `CONVOY_LINK_PIE=1` at build time keeps the toolchain's default (PIE) for those who want the
/// executable randomized too.
fn link_position_dependent() {
    println!("cargo:rerun-if-env-changed=CONVOY_LINK_PIE");
    let linux_gnu = std::env::var("CARGO_CFG_TARGET_OS").is_ok_and(|os| os == "linux")
        && std::env::var("CARGO_CFG_TARGET_ENV").is_ok_and(|env| env == "gnu");
    if linux_gnu && std::env::var_os("CONVOY_LINK_PIE").is_none_or(|v| v.is_empty() || v == "0") {
        println!("cargo:rustc-link-arg-bins=-no-pie");
    }
}

fn compile() -> Result<(), Box<dyn std::error::Error>> {
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR")?);
    let files = ["armada/submit.proto", "armada/event.proto", "armada/job.proto", "armada/health.proto"];
    let fds = protox::compile(files, ["proto"])?;
    std::fs::write(out.join("descriptors.bin"), prost::Message::encode_to_vec(&fds))?;
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        // The tests build their client over a channel of their own.
        .build_transport(false)
        // Pod specs stay encoded: they become Kubernetes JSON through their descriptors.
        .extern_path(".k8s.io.api.core.v1.PodSpec", "crate::grpc::k8s::EncodedPodSpec")
        .compile_fds(fds)?;
    Ok(())
}
