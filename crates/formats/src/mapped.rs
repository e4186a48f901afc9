//! A checkpoint file mapped read-only, and the rule for a file that shrinks under its map.
//!
//! A memory-mapped reader (transformers', llama.cpp's and this one) reads a file in place. When
//! another program truncates the file while it is mapped, a read of a page past the new end is a
//! bus error (SIGBUS), which would kill the process with nothing said and the work done lost. So
//! every map is registered, by its address range, with the path it was read from, and the first
//! map installs a handler for SIGBUS: a fault inside a registered map ends the process with exit
//! status 2 and `error: PATH changed while it was read …` on stderr (what the command printed
//! before stays printed); a fault anywhere else gets the default action, as without the handler.
//!
//! The handler does only what a signal handler may: it reads atomics, writes a message formatted
//! when the file was mapped, and calls `_exit`. At most [`SLOTS`] maps are registered at once; a
//! map beyond them reads as before, without the message.

use std::fmt;
use std::fs::File;
use std::ops::Deref;
use std::path::Path;
use std::sync::Once;
use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};

use memmap2::Mmap;

/// A file mapped read-only and registered for the bus-error message while it is mapped.
pub struct Mapped {
    map: Mmap,
    slot: Option<usize>,
}

impl Deref for Mapped {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.map
    }
}

impl fmt::Debug for Mapped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} bytes mapped", self.map.len())
    }
}

impl Drop for Mapped {
    fn drop(&mut self) {
        if let Some(i) = self.slot {
            SLOT[i].clear();
        }
    }
}

/// Maps `file` read-only: the one place a checkpoint's bytes are mapped. `path` names it in the
/// message shown if it shrinks while mapped.
#[allow(unsafe_code)]
pub fn map_file(file: &File, path: &Path) -> std::io::Result<Mapped> {
    // SAFETY: the map is read-only, and the tensors read in place share it (an `Arc`) and keep it
    // alive. A file truncated under the map faults on reading past its new end; that fault is
    // handled below (the process ends with a message), never read as data.
    let map = unsafe { Mmap::map(file) }?;
    INSTALL.call_once(install_handler);
    let slot = register(&map, path);
    Ok(Mapped { map, slot })
}

/// How many maps are registered at once.
pub const SLOTS: usize = 256;

/// One registered map: its address range and its message (owned by the slot while it is set).
struct Slot {
    start: AtomicUsize,
    end: AtomicUsize,
    message: AtomicPtr<u8>,
    len: AtomicUsize,
}

impl Slot {
    const fn empty() -> Slot {
        Slot {
            start: AtomicUsize::new(0),
            end: AtomicUsize::new(0),
            message: AtomicPtr::new(std::ptr::null_mut()),
            len: AtomicUsize::new(0),
        }
    }

    /// Unregisters the map: its range first, so that no fault is matched to a freed message.
    #[allow(unsafe_code)]
    fn clear(&self) {
        self.end.store(0, Ordering::Release);
        self.start.store(0, Ordering::Release);
        let len = self.len.load(Ordering::Acquire);
        let message = self.message.swap(std::ptr::null_mut(), Ordering::AcqRel);
        if !message.is_null() {
            // SAFETY: `message` is the pointer `register` leaked from a boxed slice of `len` bytes,
            // taken out of the slot by the swap above, so it is freed once. No handler reads it:
            // the map is being dropped, so nothing reads its pages and no fault falls in its range.
            drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(message, len)) });
        }
    }
}

static SLOT: [Slot; SLOTS] = [const { Slot::empty() }; SLOTS];
static INSTALL: Once = Once::new();

/// Registers `map` with its message in a free slot; `None` when every slot is taken or the map is
/// empty.
fn register(map: &Mmap, path: &Path) -> Option<usize> {
    if map.is_empty() {
        return None;
    }
    let text = format!(
        "error: {} changed while it was read: it is shorter than when it was opened (another program truncated or \
         rewrote it)\n",
        path.display()
    );
    let message = Box::into_raw(text.into_bytes().into_boxed_slice());
    let (ptr, len) = (message as *mut u8, message.len());
    for (i, slot) in SLOT.iter().enumerate() {
        if slot.message.compare_exchange(std::ptr::null_mut(), ptr, Ordering::AcqRel, Ordering::Acquire).is_ok() {
            let start = map.as_ptr() as usize;
            slot.len.store(len, Ordering::Release);
            slot.start.store(start, Ordering::Release);
            slot.end.store(start + map.len(), Ordering::Release);
            return Some(i);
        }
    }
    #[allow(unsafe_code)]
    // SAFETY: `message` was leaked above and never shared: no slot took it.
    drop(unsafe { Box::from_raw(message) });
    None
}

/// Installs [`on_bus_error`] for SIGBUS.
#[allow(unsafe_code)]
fn install_handler() {
    // SAFETY: `sigaction` is given a zeroed struct with a valid handler of the SA_SIGINFO form and an
    // empty mask; the handler itself is async-signal-safe (see `on_bus_error`).
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = on_bus_error as *const () as usize;
        action.sa_flags = libc::SA_SIGINFO;
        libc::sigemptyset(&mut action.sa_mask);
        libc::sigaction(libc::SIGBUS, &action, std::ptr::null_mut());
    }
}

/// The SIGBUS handler: a fault inside a registered map writes its message and ends the process
/// with status 2; any other fault restores the default action, under which the faulting read,
/// run again on return, ends the process as it would have without this handler.
#[allow(unsafe_code)]
extern "C" fn on_bus_error(_: libc::c_int, info: *mut libc::siginfo_t, _: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid `siginfo_t` to an SA_SIGINFO handler; for SIGBUS its
    // address is the faulting one. Only atomics are read, and `write`, `_exit` and `signal` are
    // async-signal-safe. A message pointer read from a slot whose range holds the address is
    // live: a slot's range is cleared before its message is freed, and only when its map is
    // dropped, which cannot happen while a read of the map faults.
    unsafe {
        let address = (*info).si_addr() as usize;
        for slot in &SLOT {
            let (start, end) = (slot.start.load(Ordering::Acquire), slot.end.load(Ordering::Acquire));
            let message = slot.message.load(Ordering::Acquire);
            if start <= address && address < end && !message.is_null() {
                libc::write(2, message as *const libc::c_void, slot.len.load(Ordering::Acquire));
                libc::_exit(2);
            }
        }
        libc::signal(libc::SIGBUS, libc::SIG_DFL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_map_is_registered_while_it_lives_and_its_slot_is_freed_after() {
        let path = std::env::temp_dir().join(format!("stepcheck-mapped-{}", std::process::id()));
        std::fs::write(&path, b"0123456789").expect("written");
        let file = File::open(&path).expect("opened");
        let _ = std::fs::remove_file(&path);
        let map = map_file(&file, Path::new("some/model.gguf")).expect("mapped");
        assert_eq!(&map[..], b"0123456789");
        let i = map.slot.expect("a slot");
        let start = SLOT[i].start.load(Ordering::Acquire);
        assert_eq!((start, SLOT[i].end.load(Ordering::Acquire)), (map.as_ptr() as usize, start + 10));
        let len = SLOT[i].len.load(Ordering::Acquire);
        // SAFETY: the slot holds a live message of `len` bytes while the map lives.
        #[allow(unsafe_code)]
        let message = unsafe { std::slice::from_raw_parts(SLOT[i].message.load(Ordering::Acquire), len) };
        assert!(String::from_utf8_lossy(message).starts_with("error: some/model.gguf changed while it was read"));
        drop(map);
        assert!(SLOT[i].message.load(Ordering::Acquire).is_null());
        assert_eq!(SLOT[i].end.load(Ordering::Acquire), 0);
    }
}
