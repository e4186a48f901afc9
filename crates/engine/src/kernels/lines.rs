//! f32 scratch that starts on a cache line.

/// The bytes of a cache line here: a 512-bit load of 16 f32 values reads one line when it starts
/// on one, two when it does not.
pub(crate) const LINE_BYTES: usize = 64;

/// The most values a buffer skips to reach a line.
const SLACK: usize = LINE_BYTES / size_of::<f32>() - 1;

/// A buffer of f32 values whose first value starts on a cache line, for the vectors a batched
/// matmat reads: its kernels load 16 values at each multiple of 16, so each load reads one line,
/// where a buffer as the allocator places it (16 bytes off a line, often) makes most loads read
/// two. Measured, one thread, a batch of 8 against f32 weights on a line: from L2 (`[64, 1024]`,
/// `[512, 1024]`) 35 GFMA/s with the vectors 16 bytes off a line, 47 with them on one; from L3
/// (`[3584, 1024]`) 24–26 against 31–41. Over the 0.8B step's matrices from memory, on two
/// threads, the difference is within this machine's noise.
#[derive(Default)]
pub(crate) struct LineAligned {
    values: Vec<f32>,
    at: usize,
    len: usize,
}

impl LineAligned {
    /// The buffer made `n` zeros, starting on a line (its allocation kept from call to call).
    pub fn zeroed(&mut self, n: usize) -> &mut [f32] {
        self.values.clear();
        self.values.resize(n + SLACK, 0.0);
        // An f32 pointer reaches a 64-byte boundary within 15 values; were `align_offset` ever
        // to decline (it may), the values would merely start off a line.
        self.at = self.values.as_ptr().align_offset(LINE_BYTES).min(SLACK);
        self.len = n;
        &mut self.values[self.at..self.at + n]
    }

    /// The values [`LineAligned::zeroed`] last made.
    pub fn values(&self) -> &[f32] {
        &self.values[self.at..self.at + self.len]
    }

    /// The values [`LineAligned::zeroed`] last made, to write.
    pub fn values_mut(&mut self) -> &mut [f32] {
        &mut self.values[self.at..self.at + self.len]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_length_starts_on_a_line_and_is_zero() {
        let mut buf = LineAligned::default();
        for n in [0, 1, 15, 16, 17, 1_000, 28_672, 3] {
            buf.values_mut().fill(7.0);
            let values = buf.zeroed(n);
            assert_eq!(values.len(), n);
            assert!(values.iter().all(|&v| v == 0.0));
            assert_eq!(values.as_ptr() as usize % LINE_BYTES, 0, "{n} values");
            assert_eq!(buf.values().len(), n);
        }
    }
}
