//! Completed calls of one region on one thread: 16 bytes per call, in chunks that are never
//! moved once full, so a long run never copies its history and appending stays O(1).

/// One completed call: `CLOCK_MONOTONIC` nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C)]
pub struct Call {
    pub start: i64,
    pub end: i64,
}

const FIRST_CHUNK: usize = 64;
const MAX_CHUNK: usize = 1 << 16; // 1 MiB of calls per chunk

#[derive(Debug, Default)]
pub struct CallLog {
    full: Vec<Vec<Call>>,
    current: Vec<Call>,
}

impl CallLog {
    #[inline(always)]
    pub fn push(&mut self, call: Call) {
        if self.current.len() == self.current.capacity() {
            self.new_chunk();
        }
        self.current.push(call);
    }

    #[cold]
    fn new_chunk(&mut self) {
        let next = (self.current.capacity() * 2).clamp(FIRST_CHUNK, MAX_CHUNK);
        let full = std::mem::replace(&mut self.current, Vec::with_capacity(next));
        if !full.is_empty() {
            self.full.push(full);
        }
    }

    pub fn len(&self) -> usize {
        self.full.iter().map(Vec::len).sum::<usize>() + self.current.len()
    }

    pub fn is_empty(&self) -> bool {
        self.current.is_empty() && self.full.is_empty()
    }

    /// Bytes held, for the memory-per-call benchmark.
    pub fn bytes_reserved(&self) -> usize {
        let calls: usize = self.full.iter().map(|c| c.capacity()).sum::<usize>() + self.current.capacity();
        calls * std::mem::size_of::<Call>()
    }

    /// The calls in recording order, consuming the log chunk by chunk.
    pub fn into_chunks(self) -> impl Iterator<Item = Vec<Call>> {
        self.full.into_iter().chain(std::iter::once(self.current)).filter(|c| !c.is_empty())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_order_and_count_across_chunks() {
        let mut log = CallLog::default();
        let n = 200_000;
        for i in 0..n {
            log.push(Call { start: i, end: i + 1 });
        }
        assert_eq!(log.len(), n as usize);
        // Chunks double from 64 to 64Ki calls, so the slack stays small.
        assert!(log.bytes_reserved() <= (n as usize + MAX_CHUNK) * 16);
        let all: Vec<Call> = log.into_chunks().flatten().collect();
        assert_eq!(all.len(), n as usize);
        assert!(all.iter().enumerate().all(|(i, c)| c.start == i as i64 && c.end == i as i64 + 1));
    }

    #[test]
    fn size_of_call_is_16_bytes() {
        assert_eq!(std::mem::size_of::<Call>(), 16);
    }
}
