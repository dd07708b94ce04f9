//! How a snapshot's rows travel: as a sequence of frames, each one encoded record. The state
//! writes and reads the frames (`store::snapshot_stream`); the Raft snapshot file
//! (`raft::snapshot_file`) carries them with its header, lengths and checksum. These two traits
//! are where the two meet without knowing each other, so a state never holds its whole snapshot
//! in memory: one frame at a time goes through.

use std::io;

/// Takes the frames of a snapshot's body, in order.
pub trait FrameSink {
    /// Appends one frame (a non-empty encoded record).
    fn frame(&mut self, bytes: &[u8]) -> io::Result<()>;
}

/// Hands out the frames of a snapshot's body, in order.
pub trait FrameSource {
    /// The next frame; `None` once every frame was read and the whole stream checked (a source
    /// over a file verifies its trailer and checksum before it answers `None`, so a reader that
    /// acts only on `None` never acts on a truncated or corrupt stream).
    fn next_frame(&mut self) -> io::Result<Option<&[u8]>>;
}

/// Frames kept in memory: for tests and small conversions.
impl FrameSink for Vec<Vec<u8>> {
    fn frame(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.push(bytes.to_vec());
        Ok(())
    }
}

/// Frames held in memory, handed out in order.
#[derive(Debug, Clone, Default)]
pub struct MemoryFrames {
    frames: std::collections::VecDeque<Vec<u8>>,
    current: Vec<u8>,
}

impl MemoryFrames {
    /// A source over `frames`.
    pub fn new(frames: Vec<Vec<u8>>) -> Self {
        Self { frames: frames.into(), current: Vec::new() }
    }
}

impl FrameSource for MemoryFrames {
    fn next_frame(&mut self) -> io::Result<Option<&[u8]>> {
        match self.frames.pop_front() {
            Some(f) => {
                self.current = f;
                Ok(Some(&self.current))
            }
            None => Ok(None),
        }
    }
}
