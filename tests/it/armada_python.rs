//! Armada's own Python client (`armada-client`, pinned in `tests/interop/requirements.txt`)
//! against a real `convoy up`: the script `tests/interop/armada_client_interop.py` creates
//! queues, submits, streams job set events until the jobs end, resumes a stream, queries status,
//! details and errors, cancels, reprioritizes and preempts.
//!
//! The client is installed from the Python package index into a virtualenv under Cargo's target
//! directory (kept between runs), or taken from `CONVOY_ARMADA_PYTHON` (a Python that imports
//! `armada_client`). Without Python or the package index the test says why and skips, unless
//! `CONVOY_REQUIRE_ARMADA_CLIENT=1` (set by `.ci/run`), which makes that a failure.

use crate::common::procs::{free_port, reap_runs, spawn_listening};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const REQUIREMENTS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/interop/requirements.txt");
const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/interop/armada_client_interop.py");

fn required() -> bool {
    crate::common::root::required("CONVOY_REQUIRE_ARMADA_CLIENT")
}

fn run(cmd: &mut Command) -> Result<Output, String> {
    let out = cmd.output().map_err(|e| format!("{cmd:?} did not start: {e}"))?;
    if out.status.success() {
        Ok(out)
    } else {
        Err(format!(
            "{cmd:?} failed ({}):\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

fn imports_client(python: &Path) -> bool {
    Command::new(python).args(["-c", "import armada_client.client"]).output().is_ok_and(|o| o.status.success())
}

/// A Python that imports `armada_client`, installing it into a virtualenv when needed.
fn python_with_client() -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os("CONVOY_ARMADA_PYTHON") {
        let p = PathBuf::from(p);
        return if imports_client(&p) {
            Ok(p)
        } else {
            Err(format!("CONVOY_ARMADA_PYTHON={} does not import armada_client", p.display()))
        };
    }
    let requirements = std::fs::read_to_string(REQUIREMENTS).map_err(|e| format!("reading {REQUIREMENTS}: {e}"))?;
    // One virtualenv per pinned requirement set, so a new pin never reuses an old install.
    let tag: u32 = requirements.bytes().fold(0u32, |h, b| h.wrapping_mul(31).wrapping_add(u32::from(b)));
    let venv = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("armada-client-venv-{tag:08x}"));
    let python = venv.join("bin").join("python");
    if imports_client(&python) {
        return Ok(python);
    }
    let _ = std::fs::remove_dir_all(&venv);
    run(Command::new("python3").args(["-m", "venv"]).arg(&venv))?;
    run(Command::new(&python).args([
        "-m",
        "pip",
        "install",
        "--quiet",
        "--disable-pip-version-check",
        "--timeout",
        "30",
        "-r",
        REQUIREMENTS,
    ]))?;
    if imports_client(&python) {
        Ok(python)
    } else {
        Err(format!("{} does not import armada_client", python.display()))
    }
}

/// Kills what `convoy up` and its jobs left when the test ends however it ends.
struct Up {
    child: std::process::Child,
    log: PathBuf,
    agent_dir: PathBuf,
}

impl Drop for Up {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("===== {} =====\n{}", self.log.display(), std::fs::read_to_string(&self.log).unwrap_or_default());
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        reap_runs(&self.agent_dir);
    }
}

#[test]
fn armada_s_python_client_drives_convoy_up() {
    let python = match python_with_client() {
        Ok(p) => p,
        Err(why) if !required() => {
            eprintln!(
                "SKIPPED armada_s_python_client_drives_convoy_up: armada-client could not be installed ({why}); \
                 set CONVOY_REQUIRE_ARMADA_CLIENT=1 to make this a failure"
            );
            return;
        }
        Err(why) => panic!("armada-client is required (CONVOY_REQUIRE_ARMADA_CLIENT=1) and: {why}"),
    };
    let tmp = tempfile::tempdir().expect("temp dir");
    let port = free_port();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_convoy"));
    cmd.args(["up", "--listen", &format!("127.0.0.1:{port}"), "--data-dir"]).arg(tmp.path().join("data"));
    cmd.current_dir(tmp.path());
    let log = tmp.path().join("up.log");
    let (child, _url) = spawn_listening(cmd, &log);
    let _up = Up { child, log, agent_dir: tmp.path().join("data").join("agent") };

    let out = Command::new(&python).arg(SCRIPT).arg(format!("127.0.0.1:{port}")).output().expect("python starts");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "the Python client's conversation failed ({}):\n{stdout}\n{stderr}", out.status);
    let summary: serde_json::Value =
        serde_json::from_str(stdout.lines().last().unwrap_or_default()).expect("the script's JSON summary");
    assert_eq!(summary["ok"], true, "{summary}");
    assert_eq!(summary["jobs"].as_array().map(Vec::len), Some(5), "{summary}");
}
