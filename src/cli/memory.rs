//! The peak memory a command used, as the kernel counts it, for the commands that report it.

/// This process's peak resident set (`VmHWM` of /proc/self/status), in bytes: its own allocations
/// and the pages of mapped weight files it read. `None` where the kernel does not say (not Linux).
pub(crate) fn peak_rss() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line["VmHWM:".len()..].split_whitespace().next()?.parse().ok()?;
    Some(kib * 1024)
}

/// `peak memory: 1.52 GiB (VmHWM, the peak resident set: allocations and mapped weights read)`.
pub fn describe(bytes: u64) -> String {
    format!(
        "peak memory: {:.2} GiB (VmHWM, the peak resident set: allocations and mapped weights read)",
        bytes as f64 / (1u64 << 30) as f64
    )
}
