//! Puts to cpu: every dtype, slices, a ≥ 1 GiB sparse tensor, a file truncated between open and put.

use crate::common::*;
use hostfirst::dtype::ALL_DTYPES;
use hostfirst::place::{buffer_to, put, PutOptions, Target};
use hostfirst::{DType, Device, Status, TensorFile};

fn bits(d: DType) -> usize {
    match d.name() {
        "F4" => 4,
        "F6_E2M3" | "F6_E3M2" => 6,
        "BOOL" | "U8" | "I8" => 8,
        n if n.starts_with("F8") => 8,
        "I16" | "U16" | "F16" | "BF16" => 16,
        "I32" | "U32" | "F32" => 32,
        _ => 64,
    }
}

#[test]
fn every_dtype_and_slices() {
    let shape = [8u64, 24];
    let mut header = String::from("{");
    let mut data = Vec::new();
    let mut expect = Vec::new();
    for (i, d) in ALL_DTYPES.iter().enumerate() {
        let n = 8 * 24 * bits(*d) / 8;
        let bytes: Vec<u8> =
            (0..n).map(|k| if *d == DType::BOOL { (k % 2) as u8 } else { (k * 7 + i * 13) as u8 }).collect();
        if i > 0 {
            header.push(',');
        }
        header.push_str(&format!(
            r#""t{i}":{{"dtype":"{}","shape":[8,24],"data_offsets":[{},{}]}}"#,
            d.name(),
            data.len(),
            data.len() + n
        ));
        data.extend_from_slice(&bytes);
        expect.push(bytes);
    }
    header.push('}');
    let mut img = (header.len() as u64).to_le_bytes().to_vec();
    img.extend_from_slice(header.as_bytes());
    img.extend_from_slice(&data);
    let path = scratch("place_cpu").join("dtypes.safetensors");
    std::fs::write(&path, &img).unwrap();
    let f = TensorFile::open(&path).unwrap();
    for (i, d) in ALL_DTYPES.iter().enumerate() {
        let v = f.view(&format!("t{i}")).unwrap();
        let b = put(
            &v,
            Target::Device(Device::CPU),
            PutOptions {
                tuning: hostfirst::engine::Tuning { threads: 3, chunk: 4096, ..Default::default() },
                ..PutOptions::default()
            },
        )
        .unwrap();
        assert_eq!((b.dtype(), b.shape(), b.device()), (*d, &shape[..], Device::CPU));
        assert_eq!(b.host_bytes().unwrap(), &expect[i][..], "{d:?}");
        // Rows 2..5 of it.
        let s = v.slice_rows(2, 5).unwrap();
        let row = expect[i].len() / 8;
        let b = put(&s, Target::Device(Device::CPU), PutOptions::default()).unwrap();
        assert_eq!(b.shape(), &[3, 24]);
        assert_eq!(b.host_bytes().unwrap(), &expect[i][2 * row..5 * row], "{d:?} slice");
        let mut back = vec![0u8; b.nbytes() as usize];
        b.copy_to_host(&mut back).unwrap();
        assert_eq!(back, &expect[i][2 * row..5 * row]);
        assert_eq!(b.copy_to_host(&mut back[..row]).unwrap_err().status(), Status::BufferTooSmall);
        let c = buffer_to(&b, Target::Device(Device::CPU)).unwrap();
        assert_eq!(c.host_bytes(), b.host_bytes());
    }
}

#[test]
fn one_gib_sparse_put() {
    // 1 GiB + 3 bytes of a sparse file: mostly zero pages, a few written markers.
    let n: u64 = (1 << 30) + 3;
    let h = format!(r#"{{"tokens":{{"dtype":"U8","shape":[{n}],"data_offsets":[0,{n}]}}}}"#);
    let path = scratch("place_cpu").join("big.safetensors");
    let mut img = (h.len() as u64).to_le_bytes().to_vec();
    img.extend_from_slice(h.as_bytes());
    std::fs::write(&path, &img).unwrap();
    let base = img.len() as u64;
    let marks = [0u64, 4096 * 1000 + 17, 1 << 29, n - 1];
    {
        use std::os::unix::fs::FileExt;
        let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        file.set_len(base + n).unwrap();
        for (k, m) in marks.iter().enumerate() {
            file.write_at(&[k as u8 + 1], base + m).unwrap();
        }
    }
    let f = TensorFile::open(&path).unwrap();
    let b = put(&f.view("tokens").unwrap(), Target::Device(Device::CPU), PutOptions::default()).unwrap();
    let bytes = b.host_bytes().unwrap();
    assert_eq!(bytes.len() as u64, n);
    for (k, m) in marks.iter().enumerate() {
        assert_eq!(bytes[*m as usize], k as u8 + 1);
    }
    assert_eq!(bytes.iter().map(|x| *x as u64).sum::<u64>(), 1 + 2 + 3 + 4);
    drop(b);
    let _ = std::fs::remove_file(&path);
}

#[test]
fn truncated_between_open_and_put() {
    let n = 1 << 20;
    let h = format!(r#"{{"t":{{"dtype":"U8","shape":[{n}],"data_offsets":[0,{n}]}}}}"#);
    let mut img = (h.len() as u64).to_le_bytes().to_vec();
    img.extend_from_slice(h.as_bytes());
    img.extend(std::iter::repeat_n(7u8, n));
    let path = scratch("place_cpu").join("trunc.safetensors");
    std::fs::write(&path, &img).unwrap();
    let f = TensorFile::open(&path).unwrap();
    let v = f.view("t").unwrap();
    std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(img.len() as u64 - n as u64 / 2).unwrap();
    let e = put(&v, Target::Device(Device::CPU), PutOptions::default()).unwrap_err();
    assert!(matches!(e.status(), Status::Truncated | Status::Io), "{e:?}");
    assert!(e.message().contains("'t'"), "{}", e.message());
}

#[test]
fn too_big_for_the_host_allocates_nothing() {
    let n: u64 = 1 << 50;
    let h = format!(r#"{{"huge":{{"dtype":"U8","shape":[{n}],"data_offsets":[0,{n}]}}}}"#);
    let path = scratch("place_cpu").join("huge.safetensors");
    let mut img = (h.len() as u64).to_le_bytes().to_vec();
    img.extend_from_slice(h.as_bytes());
    std::fs::write(&path, &img).unwrap();
    let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    if file.set_len(img.len() as u64 + n).is_err() {
        return; // the file system cannot hold a sparse 1 PiB file
    }
    let f = match TensorFile::open(&path) {
        Ok(f) => f,
        Err(_) => return,
    };
    let e = put(&f.view("huge").unwrap(), Target::Device(Device::CPU), PutOptions::default()).unwrap_err();
    assert_eq!(e.status(), Status::OutOfMemory);
    assert!(e.message().starts_with("tensor 'huge' (1024.00 TiB) does not fit on cpu: "), "{}", e.message());
    assert_eq!(e.fit().unwrap().needed, n);
    // A copy-on-write put is fit-checked too: for every page the tensor touches (what can become private).
    let v = f.view("huge").unwrap();
    let cow = PutOptions { copy_on_write: true, ..PutOptions::default() };
    let e = put(&v, Target::Device(Device::CPU), cow).unwrap_err();
    assert_eq!(e.status(), Status::OutOfMemory, "{}", e.message());
    let span = hostfirst::place::host::private_span(v.file_offset(), n);
    assert_eq!(e.fit().unwrap().needed, span);
    assert!(span > n && span <= n + 8192, "the pages the tensor touches: {span}");
    drop((f, v));
    let _ = std::fs::remove_file(&path);
}
