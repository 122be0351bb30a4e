//! Remote sources over the real S3 protocol (issue 46): moto's S3 server (pip "moto[server]", installed on first
//! use into a venv under target/, started on a free loopback port, stopped when the test binary exits) with
//! signed requests, XML errors and ETags. Through the C API (Rust FFI) and the CLI (`hostfirst inspect s3://...`).

use crate::common::{cli, run};
use crate::file_support::last_error;
use crate::remote::{copy, model, open};
use hostfirst::ffi::*;
use hostfirst::Status;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;

const SECRET: &str = "s3cr3t-that-never-shows";

struct Moto {
    endpoint: String,
    python: PathBuf,
    _child: Child,
}

/// The venv's python, installing moto[server] into target/moto-venv when it is not there yet.
fn moto_python() -> PathBuf {
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/moto-venv");
    let py = venv.join("bin/python");
    let ok = |py: &Path| Command::new(py).args(["-c", "import moto.server, boto3"]).status().is_ok_and(|s| s.success());
    if !ok(&py) {
        let st = Command::new("python3").arg("-m").arg("venv").arg(&venv).status().expect("python3 -m venv");
        assert!(st.success(), "python3 -m venv {} failed (Debian: apt-get install python3-venv)", venv.display());
        let st = Command::new(&py)
            .args(["-m", "pip", "install", "-q", "--disable-pip-version-check", "moto[server]"])
            .status()
            .expect("pip install moto[server]");
        assert!(st.success() && ok(&py), "pip install moto[server] into {} failed", venv.display());
    }
    py
}

fn moto() -> &'static Moto {
    static M: OnceLock<Moto> = OnceLock::new();
    M.get_or_init(|| {
        let python = moto_python();
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        // The shell's `read` ends the server when this process exits (its stdin pipe closes).
        let child = Command::new("sh")
            .arg("-c")
            .arg("\"$0\" -m moto.server -H 127.0.0.1 -p \"$1\" >/dev/null 2>&1 & pid=$!; read _; kill $pid")
            .arg(&python)
            .arg(port.to_string())
            .stdin(Stdio::piped())
            .spawn()
            .expect("start moto's server");
        let endpoint = format!("http://127.0.0.1:{port}");
        let t0 = std::time::Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(t0.elapsed().as_secs() < 60, "moto's server did not start on port {port}");
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        for (k, v) in [
            ("AWS_ACCESS_KEY_ID", "testing"),
            ("AWS_SECRET_ACCESS_KEY", SECRET),
            ("AWS_REGION", "us-east-1"),
            ("AWS_ENDPOINT_URL", endpoint.as_str()),
            ("AWS_ALLOW_HTTP", "true"),
        ] {
            std::env::set_var(k, v);
        }
        let m = Moto { endpoint, python, _child: child };
        boto(&m, "s3.create_bucket(Bucket='models')");
        m
    })
}

/// Runs a line of boto3 against the server (`s3` is the client).
fn boto(m: &Moto, code: &str) {
    let script = format!(
        "import boto3\ns3 = boto3.client('s3', endpoint_url='{}', region_name='us-east-1', aws_access_key_id='testing', \
         aws_secret_access_key='x')\n{code}\n",
        m.endpoint
    );
    let out = Command::new(&m.python).args(["-c", &script]).output().unwrap();
    assert!(out.status.success(), "boto3: {}", String::from_utf8_lossy(&out.stderr));
}

fn put(key: &str, bytes: &[u8]) {
    let m = moto();
    let f =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("moto-{}-{}", std::process::id(), key.replace('/', "_")));
    std::fs::write(&f, bytes).unwrap();
    boto(m, &format!("s3.upload_file({:?}, 'models', {key:?})", f.to_str().unwrap()));
    std::fs::remove_file(&f).unwrap();
}

fn tensor(image: &[u8], name: &str) -> Vec<u8> {
    let f = hostfirst::TensorFile::from_bytes(image.to_vec()).unwrap();
    f.view(name).unwrap().to_vec().unwrap()
}

#[test]
fn an_s3_object_opens_and_reads_byte_exact() {
    let img = model(4, 3000, 0);
    put("dir/m.safetensors", &img);
    let f = open("s3://models/dir/m.safetensors").unwrap_or_else(|s| panic!("{s:?}: {}", last_error()));
    for t in ["t000", "t003"] {
        assert_eq!(copy(f, t).unwrap(), tensor(&img, t), "{t}");
    }
    assert_eq!(hostfirst_file_free(f), Status::Ok);
}

#[test]
fn a_missing_s3_object_is_not_found_and_no_message_shows_a_credential() {
    moto();
    assert_eq!(open("s3://models/dir/none.safetensors").unwrap_err(), Status::NotFound, "{}", last_error());
    let m = last_error();
    assert!(m.contains("s3://models/dir/none.safetensors") && !m.contains(SECRET), "{m}");
    assert_eq!(open("s3://no-such-bucket/k.safetensors").unwrap_err(), Status::NotFound, "{}", last_error());
    assert!(!last_error().contains(SECRET), "{}", last_error());
}

#[test]
fn a_replaced_s3_object_fails_with_io() {
    let img = model(2, 5000, 0);
    put("swap.safetensors", &img);
    let f = open("s3://models/swap.safetensors").unwrap();
    let mut other = img.clone();
    let n = other.len();
    other[n - 10..].fill(0xAB);
    put("swap.safetensors", &other);
    assert_eq!(copy(f, "t001").unwrap_err(), Status::Io);
    assert!(last_error().contains("changed since it was opened"), "{}", last_error());
    assert_eq!(hostfirst_file_free(f), Status::Ok);
}

#[test]
fn an_s3_set_reads_its_parts_beside_the_index() {
    let (a, b) = (model(1, 100, 0), model(1, 50, 0));
    let hl = u64::from_le_bytes(b[..8].try_into().unwrap()) as usize;
    let mut b2 = b.clone();
    let h = String::from_utf8(b[8..8 + hl].to_vec()).unwrap().replace("\"t000\"", "\"u000\"");
    b2.splice(8..8 + hl, h.into_bytes());
    put("set/p1.safetensors", &a);
    put("set/p2.safetensors", &b2);
    put(
        "set/model.safetensors.index.json",
        br#"{"metadata":{},"weight_map":{"t000":"p1.safetensors","u000":"p2.safetensors"}}"#,
    );
    let f = open("s3://models/set/model.safetensors.index.json").unwrap_or_else(|s| panic!("{s:?}: {}", last_error()));
    assert_eq!(copy(f, "t000").unwrap(), tensor(&a, "t000"));
    assert_eq!(copy(f, "u000").unwrap(), tensor(&b2, "u000"));
    assert_eq!(hostfirst_file_free(f), Status::Ok);
}

#[test]
fn the_cli_inspects_an_s3_object() {
    let img = model(3, 64, 0);
    put("cli/m.safetensors", &img);
    let m = moto();
    let env: Vec<(&str, Option<&str>)> = vec![
        ("AWS_ACCESS_KEY_ID", Some("testing")),
        ("AWS_SECRET_ACCESS_KEY", Some(SECRET)),
        ("AWS_REGION", Some("us-east-1")),
        ("AWS_ENDPOINT_URL", Some(m.endpoint.as_str())),
        ("AWS_ALLOW_HTTP", Some("true")),
    ];
    let out = run(&cli(), &["inspect", "s3://models/cli/m.safetensors"], &env);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    for t in ["t000", "t001", "t002"] {
        assert!(stdout.contains(t), "{stdout}");
    }
    let out = run(&cli(), &["inspect", "s3://models/cli/none.safetensors"], &env);
    assert!(!out.status.success());
    let mut all = String::from_utf8_lossy(&out.stderr).into_owned();
    all.push_str(&String::from_utf8_lossy(&out.stdout));
    assert!(all.contains("NOT_FOUND") && !all.contains(SECRET), "{all}");
}
