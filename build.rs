//! Compiles Armada's gRPC contract under `proto/` (feature `grpc`) with protox, a protobuf
//! compiler in Rust: no `protoc` is needed. The Rust types and the tonic services go to
//! `OUT_DIR/api.rs`; the descriptor set (which `src/grpc/k8s.rs` reads to turn pod specs into
//! Kubernetes JSON) to `OUT_DIR/descriptors.bin`.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=proto");
    if std::env::var_os("CARGO_FEATURE_GRPC").is_none() {
        return;
    }
    if let Err(e) = compile() {
        eprintln!("error: compiling proto/: {e}");
        std::process::exit(1);
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
