//! Test-only exports, compiled with the `test-hooks` feature. Never part of a release build.

use crate::error::Status;

/// Test hook: panics inside the boundary. Must return `HOSTFIRST_STATUS_PANIC` and leave the library usable.
/// Only present when built with the `test-hooks` feature.
#[no_mangle]
pub extern "C" fn hostfirst__test_panic() -> Status {
    hostfirst_boundary!("hostfirst__test_panic", {
        let v: Vec<u8> = Vec::new();
        let i = std::hint::black_box(3usize);
        let _ = v[i];
        Ok(())
    })
}

/// Test hook: panics inside a value-returning boundary; must return the documented default (-1).
#[no_mangle]
pub extern "C" fn hostfirst__test_panic_value() -> i64 {
    hostfirst_boundary!("hostfirst__test_panic_value", default = -1, {
        if std::hint::black_box(true) {
            panic!("deliberate test panic");
        }
        0
    })
}
