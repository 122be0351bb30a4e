//! The live-handle registry.
//!
//! A C handle (`hostfirst_file*`, `hostfirst_view*`, ...) is not an address: it is a registry id that is never
//! reused, dressed as a pointer. Every entry point looks the id up; a handle that was freed, was never issued,
//! or is of another type gives `INVALID_HANDLE` instead of undefined behaviour, in every build. The registry
//! holds an `Arc` of the core object, so a call in flight on one thread keeps its object alive while another
//! thread frees the handle.

use super::args::out_ptr;
use crate::error::{Error, Result, Status};
use crate::forksafe::GlobalRwLock;
use std::any::Any;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// An opaque C handle type and the core object it stands for.
pub(crate) trait Handle: Sized {
    /// The core object.
    type Target: Send + Sync + 'static;
    /// The C type name, for messages.
    const NAME: &'static str;
}

pub(crate) struct Slot {
    type_name: &'static str,
    object: Arc<dyn Any + Send + Sync>,
}

/// The live handles by id.
pub(crate) static REGISTRY: GlobalRwLock<BTreeMap<usize, Slot>> = GlobalRwLock::new(BTreeMap::new());

fn registry() -> &'static GlobalRwLock<BTreeMap<usize, Slot>> {
    &REGISTRY
}

static NEXT_ID: AtomicUsize = AtomicUsize::new(1);
/// Ids are spaced so a handle looks like an aligned pointer and small integers never collide with one.
const STRIDE: usize = 16;

/// Registers an object and returns its new handle.
pub(crate) fn insert<H: Handle>(object: Arc<H::Target>) -> *mut H {
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed).wrapping_mul(STRIDE);
    let slot = Slot { type_name: H::NAME, object };
    registry().write().insert(id, slot);
    id as *mut H
}

/// Registers a new object.
pub(crate) fn insert_new<H: Handle>(object: H::Target) -> *mut H {
    insert::<H>(Arc::new(object))
}

/// Looks a handle up. NULL gives `NULL_ARGUMENT`; an unknown or wrong-type handle gives `INVALID_HANDLE`.
pub(crate) fn get<H: Handle>(p: *const H, param: &str) -> Result<Arc<H::Target>> {
    if p.is_null() {
        return Err(Error::new(Status::NullArgument, format!("{} handle '{param}' is NULL", H::NAME)));
    }
    let id = p as usize;
    let reg = registry().read();
    match reg.get(&id) {
        None => Err(Error::new(
            Status::InvalidHandle,
            format!("'{param}' ({id:#x}) is not a live {} handle (already freed, or never issued)", H::NAME),
        )),
        Some(slot) => Arc::clone(&slot.object).downcast::<H::Target>().map_err(|_| {
            Error::new(
                Status::InvalidHandle,
                format!("'{param}' ({id:#x}) is a {} handle, not a {}", slot.type_name, H::NAME),
            )
        }),
    }
}

/// Frees a handle. NULL is a no-op; an unknown or wrong-type handle gives `INVALID_HANDLE` and frees nothing.
/// Returns the object if this was the last reference held by the registry.
pub(crate) fn remove<H: Handle>(p: *mut H, param: &str) -> Result<Option<Arc<H::Target>>> {
    if p.is_null() {
        return Ok(None);
    }
    let id = p as usize;
    let mut reg = registry().write();
    match reg.get(&id) {
        None => Err(Error::new(
            Status::InvalidHandle,
            format!("'{param}' ({id:#x}) is not a live {} handle (double free, or never issued)", H::NAME),
        )),
        Some(slot) if !slot.object.is::<H::Target>() => Err(Error::new(
            Status::InvalidHandle,
            format!("'{param}' ({id:#x}) is a {} handle, not a {}; nothing freed", slot.type_name, H::NAME),
        )),
        Some(_) => {
            let slot = reg.remove(&id).expect("present");
            drop(reg);
            Ok(slot.object.downcast::<H::Target>().ok())
        }
    }
}

/// Number of live handles of all types, DLPack exports (the core's) included.
pub(crate) fn live_count() -> usize {
    registry().read().len() + crate::dlpack::live_exports()
}

/// Writes the number of live handles of all types (files, views, buffers, loads, ...) to `*out`.
///
/// Useful for leak checks: after every handle is freed the count returns to what it was. Errors:
/// `NULL_ARGUMENT` (`out`). Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_handle_count(out: *mut usize) -> Status {
    hostfirst_boundary!("hostfirst_handle_count", {
        *out_ptr(out, "out")? = live_count();
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    struct A;
    struct B;
    impl Handle for A {
        type Target = u32;
        const NAME: &'static str = "test_a";
    }
    impl Handle for B {
        type Target = String;
        const NAME: &'static str = "test_b";
    }

    #[test]
    fn lifecycle_and_misuse() {
        let a = insert_new::<A>(7);
        let b = insert_new::<B>("x".into());
        assert_eq!(*get::<A>(a, "a").unwrap(), 7);
        let e = get::<A>(b as *const A, "a").unwrap_err();
        assert_eq!(e.status(), Status::InvalidHandle);
        assert!(e.message().contains("test_b handle, not a test_a"), "{}", e.message());
        assert_eq!(remove::<A>(b as *mut A, "a").unwrap_err().status(), Status::InvalidHandle);
        assert!(remove::<A>(a, "a").unwrap().is_some());
        assert_eq!(remove::<A>(a, "a").unwrap_err().status(), Status::InvalidHandle);
        assert_eq!(get::<A>(a, "a").unwrap_err().status(), Status::InvalidHandle);
        assert_eq!(get::<A>(std::ptr::null(), "a").unwrap_err().status(), Status::NullArgument);
        assert!(remove::<A>(std::ptr::null_mut(), "a").unwrap().is_none());
        assert_eq!(get::<A>(0x1234 as *const A, "a").unwrap_err().status(), Status::InvalidHandle);
        remove::<B>(b, "b").unwrap();
    }
}
