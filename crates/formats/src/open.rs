//! Opening an input file: only a regular file is read.
//!
//! A FIFO with no writer would block the open and every read forever, a directory or a device has
//! no size to check before reading: each is refused with a typed error naming what it is. The file
//! is opened without blocking (`O_NONBLOCK`, which changes nothing for a regular file's reads), then
//! its kind is read from the open file itself, so nothing can be swapped in between.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileTypeExt as _, OpenOptionsExt as _};
use std::path::Path;

/// Opens `path` for reading if it is a regular file (a symbolic link is followed); anything else
/// is an [`io::ErrorKind::InvalidInput`] error saying what it is.
pub fn open_regular(path: &Path) -> io::Result<File> {
    let file = OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open(path)?;
    let kind = file.metadata()?.file_type();
    let what = if kind.is_file() {
        return Ok(file);
    } else if kind.is_dir() {
        "a directory"
    } else if kind.is_fifo() {
        "a FIFO"
    } else if kind.is_socket() {
        "a socket"
    } else if kind.is_char_device() || kind.is_block_device() {
        "a device"
    } else {
        "not a file"
    };
    Err(io::Error::new(io::ErrorKind::InvalidInput, format!("not a regular file: {what}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_a_device_and_a_fifo_are_refused_by_what_they_are_and_a_file_is_opened() {
        let dir = std::env::temp_dir().join(format!("stepcheck-open-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("a scratch folder");
        let fifo = dir.join("fifo");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status().is_ok_and(|s| s.success());
        assert!(made, "mkfifo made {}", fifo.display());
        let file = dir.join("file");
        std::fs::write(&file, b"x").expect("a file");
        let said = |p: &Path| open_regular(p).err().map(|e| e.to_string());
        assert_eq!(said(&dir).as_deref(), Some("not a regular file: a directory"));
        assert_eq!(said(Path::new("/dev/null")).as_deref(), Some("not a regular file: a device"));
        // With no writer: an open that blocked would hang the test here.
        assert_eq!(said(&fifo).as_deref(), Some("not a regular file: a FIFO"));
        assert!(open_regular(&file).is_ok());
        std::fs::remove_dir_all(&dir).expect("removed");
    }
}
