//! The snapshot file format: what `snapshots/*.snap` hold and what Raft streams, chunk by chunk,
//! to a member that must catch up by snapshot.
//!
//! Layout (snapshot file format [`SNAPSHOT_FORMAT_VERSION`]; integers big-endian):
//!
//! ```text
//! magic    8 bytes   "CVYSNAP\0"
//! version  u32       the snapshot file format
//! frames   u32 length (1 ..= MAX_FRAME) + that many bytes, repeated:
//!            frame 0: SnapshotHeaderRecord (the snapshot's meta)
//!            frame 1..: the state's frames (store::snapshot_stream: schema version, then rows)
//! end      u32 0
//! trailer  u64 number of frames (header included), then 32 bytes: SHA-256 of every byte above
//! ```
//!
//! and nothing after. Frames are written while the state is read from a pinned transaction and
//! read back one at a time, so neither side holds more than one frame and a buffer. The reader
//! checks the checksum, the frame count and the end of the file before it reports the last
//! frame read ([`FrameSource::next_frame`] answers `None` only then), so an install that acts
//! only on a complete stream never acts on a truncated or corrupt file. SHA-256 rather than a
//! CRC: `ring` is already compiled in (rustls), and it also guards against a file mixed up with
//! another of the same length.

use super::types::SnapshotMeta;
use crate::record::raft::{SnapshotHeaderRecord, SnapshotMetaRecord};
use crate::record::{CodecError, FrameSink, FrameSource, SNAPSHOT_FORMAT_VERSION, decode, encode};
use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

/// The first bytes of every snapshot file.
pub(crate) const MAGIC: [u8; 8] = *b"CVYSNAP\0";

/// Largest frame written or accepted: far above any row (a job's payload is bounded by the
/// request size), and small enough that a corrupt length is refused before anything is read.
pub(crate) const MAX_FRAME: u32 = 256 << 20;

/// Buffer of the file reader and writer.
const BUFFER: usize = 1 << 20;

/// Length of the trailer after the end marker.
const TRAILER: usize = 8 + 32;

/// A snapshot file that cannot be written or read as one.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotFileError {
    /// The file could not be created, read or written.
    #[error("snapshot file {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// The file does not start with the snapshot magic.
    #[error("{path} is not a convoy snapshot file")]
    NotASnapshot {
        /// The file.
        path: PathBuf,
    },
    /// The file has another format version.
    #[error(
        "snapshot file {path} has format version {found} and this binary reads {supported}: every server of a \
         cluster must run the same convoy release"
    )]
    Version {
        /// The file.
        path: PathBuf,
        /// Its format version.
        found: u32,
        /// The one this binary reads.
        supported: u32,
    },
    /// The file ends before its trailer.
    #[error("snapshot file {path} is truncated: it ends at byte {offset}, inside {inside}")]
    Truncated {
        /// The file.
        path: PathBuf,
        /// Where it ends.
        offset: u64,
        /// What was being read there.
        inside: &'static str,
    },
    /// A frame length above [`MAX_FRAME`].
    #[error("snapshot file {path} is corrupt: a frame of {len} bytes at byte {offset} (the limit is {MAX_FRAME})")]
    FrameTooLarge {
        /// The file.
        path: PathBuf,
        /// Where the frame starts.
        offset: u64,
        /// Its claimed length.
        len: u64,
    },
    /// The header frame does not decode.
    #[error("snapshot file {path} has a corrupt header")]
    Header {
        /// The file.
        path: PathBuf,
        /// The codec's reason.
        #[source]
        source: CodecError,
    },
    /// The trailer's checksum or frame count does not match the frames.
    #[error("snapshot file {path} is corrupt: {detail}")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What does not match.
        detail: String,
    },
}

impl From<SnapshotFileError> for io::Error {
    fn from(e: SnapshotFileError) -> io::Error {
        let kind = match &e {
            SnapshotFileError::Io { source, .. } => source.kind(),
            _ => io::ErrorKind::InvalidData,
        };
        io::Error::new(kind, e)
    }
}

/// Writes a snapshot file: the header at creation, then frames, then the trailer at
/// [`finish`](Self::finish). A file that is not finished is not a snapshot (the reader refuses
/// it), so a writer dropped half-way leaves only a temporary file to remove.
pub struct SnapshotWriter {
    out: HashingWriter<BufWriter<File>>,
    path: PathBuf,
    frames: u64,
}

/// What a finished snapshot file holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Finished {
    /// Its length.
    pub bytes: u64,
    /// Its frames, header included.
    pub frames: u64,
}

impl SnapshotWriter {
    /// Creates `path` (which must not exist) and writes the header describing `meta`.
    pub fn create(path: &Path, meta: &SnapshotMeta) -> Result<Self, SnapshotFileError> {
        let io = |source| SnapshotFileError::Io { path: path.to_path_buf(), source };
        let file = File::options().write(true).create_new(true).open(path).map_err(io)?;
        let mut w =
            Self { out: HashingWriter::new(BufWriter::with_capacity(BUFFER, file)), path: path.into(), frames: 0 };
        w.out.write_all(&MAGIC).map_err(io)?;
        w.out.write_all(&SNAPSHOT_FORMAT_VERSION.to_be_bytes()).map_err(io)?;
        let header = encode(&SnapshotHeaderRecord { meta: SnapshotMetaRecord::from(meta) })
            .map_err(|e| io(io::Error::new(io::ErrorKind::InvalidInput, e)))?;
        w.frame(&header).map_err(io)?;
        Ok(w)
    }

    /// Writes the end marker and the trailer, and makes the file durable (fsync). The caller
    /// renames it into place and syncs the directory.
    pub fn finish(mut self) -> Result<Finished, SnapshotFileError> {
        let path = self.path.clone();
        let io = |source| SnapshotFileError::Io { path: path.clone(), source };
        self.out.write_all(&0u32.to_be_bytes()).map_err(io)?;
        let digest = self.out.ctx.clone().finish();
        let mut trailer = [0u8; TRAILER];
        trailer[..8].copy_from_slice(&self.frames.to_be_bytes());
        trailer[8..].copy_from_slice(digest.as_ref());
        self.out.inner.write_all(&trailer).map_err(io)?;
        let bytes = self.out.count + TRAILER as u64;
        let file = self.out.inner.into_inner().map_err(|e| io(e.into_error()))?;
        file.sync_all().map_err(io)?;
        Ok(Finished { bytes, frames: self.frames })
    }
}

impl FrameSink for SnapshotWriter {
    fn frame(&mut self, bytes: &[u8]) -> io::Result<()> {
        let len = u32::try_from(bytes.len()).ok().filter(|l| (1..=MAX_FRAME).contains(l)).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("a snapshot frame of {} bytes (frames hold 1 to {MAX_FRAME} bytes)", bytes.len()),
            )
        })?;
        self.out.write_all(&len.to_be_bytes())?;
        self.out.write_all(bytes)?;
        self.frames += 1;
        Ok(())
    }
}

/// Reads a snapshot file frame by frame (see the module docs for what it checks).
pub struct SnapshotReader {
    input: HashingReader<BufReader<File>>,
    path: PathBuf,
    meta: SnapshotMeta,
    frames: u64,
    frame: Vec<u8>,
    done: bool,
}

impl SnapshotReader {
    /// Opens `path` and reads its header.
    pub fn open(path: &Path) -> Result<Self, SnapshotFileError> {
        let file = File::open(path).map_err(|source| SnapshotFileError::Io { path: path.into(), source })?;
        Self::from_file(file, path)
    }

    /// Reads the header of `file` (at its start), which is at `path` (for messages).
    pub fn from_file(file: File, path: &Path) -> Result<Self, SnapshotFileError> {
        let mut r = Self {
            input: HashingReader::new(BufReader::with_capacity(BUFFER, file)),
            path: path.into(),
            meta: SnapshotMeta::default(),
            frames: 0,
            frame: Vec::new(),
            done: false,
        };
        let mut magic = [0u8; 8];
        r.read_exact(&mut magic, "the magic").map_err(|e| match e {
            SnapshotFileError::Truncated { path, .. } => SnapshotFileError::NotASnapshot { path },
            other => other,
        })?;
        if magic != MAGIC {
            return Err(SnapshotFileError::NotASnapshot { path: r.path });
        }
        let mut version = [0u8; 4];
        r.read_exact(&mut version, "the format version")?;
        let found = u32::from_be_bytes(version);
        if found != SNAPSHOT_FORMAT_VERSION {
            return Err(SnapshotFileError::Version { path: r.path, found, supported: SNAPSHOT_FORMAT_VERSION });
        }
        if !r.read_frame()? {
            return Err(SnapshotFileError::Corrupt { path: r.path, detail: "it has no header".into() });
        }
        let header: SnapshotHeaderRecord =
            decode(&r.frame).map_err(|source| SnapshotFileError::Header { path: r.path.clone(), source })?;
        r.meta = header.meta.into();
        Ok(r)
    }

    /// The snapshot's meta, from the header.
    pub fn meta(&self) -> &SnapshotMeta {
        &self.meta
    }

    fn read_exact(&mut self, buf: &mut [u8], inside: &'static str) -> Result<(), SnapshotFileError> {
        let offset = self.input.count;
        self.input.read_exact(buf).map_err(|source| match source.kind() {
            io::ErrorKind::UnexpectedEof => SnapshotFileError::Truncated { path: self.path.clone(), offset, inside },
            _ => SnapshotFileError::Io { path: self.path.clone(), source },
        })
    }

    /// Reads the next frame into `self.frame`; false at the end marker.
    fn read_frame(&mut self) -> Result<bool, SnapshotFileError> {
        let offset = self.input.count;
        let mut len = [0u8; 4];
        self.read_exact(&mut len, "a frame length")?;
        let len = u32::from_be_bytes(len);
        if len == 0 {
            return Ok(false);
        }
        if len > MAX_FRAME {
            return Err(SnapshotFileError::FrameTooLarge { path: self.path.clone(), offset, len: len.into() });
        }
        // Grown as bytes arrive rather than allocated from the length: a corrupt length near the
        // limit ends in a truncation error, not a large allocation.
        self.frame.clear();
        let read = (&mut self.input)
            .take(len.into())
            .read_to_end(&mut self.frame)
            .map_err(|source| SnapshotFileError::Io { path: self.path.clone(), source })?;
        if read != len as usize {
            return Err(SnapshotFileError::Truncated {
                path: self.path.clone(),
                offset: self.input.count,
                inside: "a frame",
            });
        }
        self.frames += 1;
        Ok(true)
    }

    /// Checks the trailer after the end marker, and that nothing follows it.
    fn check_trailer(&mut self) -> Result<(), SnapshotFileError> {
        let computed = self.input.ctx.clone().finish();
        let mut trailer = [0u8; TRAILER];
        self.read_exact(&mut trailer, "the trailer")?;
        let mut frames = [0u8; 8];
        frames.copy_from_slice(&trailer[..8]);
        let frames = u64::from_be_bytes(frames);
        if frames != self.frames {
            let detail = format!("the trailer counts {frames} frames and the file holds {}", self.frames);
            return Err(SnapshotFileError::Corrupt { path: self.path.clone(), detail });
        }
        if computed.as_ref() != &trailer[8..] {
            let detail = "the checksum does not match its contents".to_string();
            return Err(SnapshotFileError::Corrupt { path: self.path.clone(), detail });
        }
        let mut extra = [0u8; 1];
        match self.input.inner.read(&mut extra) {
            Ok(0) => Ok(()),
            Ok(_) => {
                Err(SnapshotFileError::Corrupt { path: self.path.clone(), detail: "bytes follow the trailer".into() })
            }
            Err(source) => Err(SnapshotFileError::Io { path: self.path.clone(), source }),
        }
    }

    /// Reads every frame to the end, checking the file, and returns how many body frames it
    /// holds.
    pub fn verify(mut self) -> Result<u64, SnapshotFileError> {
        let mut n = 0;
        while self.read_frame()? {
            n += 1;
        }
        self.check_trailer()?;
        Ok(n)
    }
}

impl FrameSource for SnapshotReader {
    fn next_frame(&mut self) -> io::Result<Option<&[u8]>> {
        if self.done {
            return Ok(None);
        }
        if self.read_frame()? {
            return Ok(Some(&self.frame));
        }
        self.check_trailer()?;
        self.done = true;
        Ok(None)
    }
}

/// Writes through, hashing and counting every byte.
struct HashingWriter<W> {
    inner: W,
    ctx: ring::digest::Context,
    count: u64,
}

impl<W> HashingWriter<W> {
    fn new(inner: W) -> Self {
        Self { inner, ctx: ring::digest::Context::new(&ring::digest::SHA256), count: 0 }
    }
}

impl<W: Write> Write for HashingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.ctx.update(&buf[..n]);
        self.count += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// Reads through, hashing and counting every byte.
struct HashingReader<R> {
    inner: R,
    ctx: ring::digest::Context,
    count: u64,
}

impl<R> HashingReader<R> {
    fn new(inner: R) -> Self {
        Self { inner, ctx: ring::digest::Context::new(&ring::digest::SHA256), count: 0 }
    }
}

impl<R: Read> Read for HashingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.ctx.update(&buf[..n]);
        self.count += n as u64;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use openraft::{CommittedLeaderId, LogId};

    fn meta() -> SnapshotMeta {
        SnapshotMeta {
            last_log_id: Some(LogId::new(CommittedLeaderId::new(3, 2), 18)),
            last_membership: Default::default(),
            snapshot_id: "3-2-18-1".into(),
        }
    }

    fn write(path: &Path, frames: &[&[u8]]) -> Finished {
        let mut w = SnapshotWriter::create(path, &meta()).unwrap();
        for f in frames {
            w.frame(f).unwrap();
        }
        w.finish().unwrap()
    }

    fn read_all(path: &Path) -> Result<Vec<Vec<u8>>, io::Error> {
        let mut r = SnapshotReader::open(path)?;
        let mut out = Vec::new();
        while let Some(f) = r.next_frame()? {
            out.push(f.to_vec());
        }
        Ok(out)
    }

    fn message(e: io::Error) -> String {
        e.into_inner().map(|i| i.to_string()).unwrap_or_default()
    }

    #[test]
    fn frames_round_trip_with_the_header() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.snap");
        let big = vec![7u8; 3 * BUFFER + 5];
        let done = write(&path, &[b"one", &big, b"three"]);
        assert_eq!(done.frames, 4, "the header is a frame");
        assert_eq!(done.bytes, std::fs::metadata(&path).unwrap().len());
        let r = SnapshotReader::open(&path).unwrap();
        assert_eq!(r.meta(), &meta());
        assert_eq!(read_all(&path).unwrap(), vec![b"one".to_vec(), big, b"three".to_vec()]);
        assert_eq!(SnapshotReader::open(&path).unwrap().verify().unwrap(), 3);
        // An empty body is a valid snapshot too.
        let empty = dir.path().join("b.snap");
        write(&empty, &[]);
        assert!(read_all(&empty).unwrap().is_empty());
    }

    #[test]
    fn the_writer_refuses_empty_frames_and_existing_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.snap");
        let mut w = SnapshotWriter::create(&path, &meta()).unwrap();
        assert_eq!(w.frame(b"").unwrap_err().kind(), io::ErrorKind::InvalidInput);
        drop(w);
        assert!(matches!(SnapshotWriter::create(&path, &meta()), Err(SnapshotFileError::Io { .. })));
    }

    #[test]
    fn every_truncation_is_a_clear_error_and_never_a_complete_stream() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.snap");
        write(&path, &[b"first frame", b"second frame"]);
        let bytes = std::fs::read(&path).unwrap();
        let cut = dir.path().join("cut.snap");
        for len in 0..bytes.len() {
            std::fs::write(&cut, &bytes[..len]).unwrap();
            let e = read_all(&cut).expect_err("a truncated file is never read whole");
            let text = message(e);
            assert!(
                text.contains("truncated") || text.contains("not a convoy snapshot"),
                "cut at {len} of {}: {text}",
                bytes.len()
            );
        }
    }

    #[test]
    fn corruption_is_caught_by_the_checksum_or_the_structure() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.snap");
        write(&path, &[b"first frame", b"second frame"]);
        let bytes = std::fs::read(&path).unwrap();
        let bad = dir.path().join("bad.snap");
        // Flip one bit anywhere: nothing reads as a complete, valid stream.
        for i in 0..bytes.len() {
            let mut b = bytes.clone();
            b[i] ^= 0x10;
            std::fs::write(&bad, &b).unwrap();
            assert!(read_all(&bad).is_err(), "a flipped bit at byte {i} went unnoticed");
        }
        // Specific messages for the common cases.
        let mut b = bytes.clone();
        let body = b.len() - TRAILER - 4 - 2;
        b[body] ^= 1;
        std::fs::write(&bad, &b).unwrap();
        assert!(message(read_all(&bad).unwrap_err()).contains("checksum does not match"));
        let mut b = bytes.clone();
        b.push(0);
        std::fs::write(&bad, &b).unwrap();
        assert!(message(read_all(&bad).unwrap_err()).contains("bytes follow the trailer"));
        let mut b = bytes.clone();
        b[8..12].copy_from_slice(&9u32.to_be_bytes());
        std::fs::write(&bad, &b).unwrap();
        let e = message(read_all(&bad).unwrap_err());
        assert!(e.contains("format version 9") && e.contains("reads 1"), "{e}");
        std::fs::write(&bad, b"PK\x03\x04 something else entirely").unwrap();
        assert!(message(read_all(&bad).unwrap_err()).contains("not a convoy snapshot"));
        // A huge frame length is refused before anything is allocated for it.
        let mut b = bytes[..12].to_vec();
        b.extend_from_slice(&u32::MAX.to_be_bytes());
        std::fs::write(&bad, &b).unwrap();
        assert!(message(read_all(&bad).unwrap_err()).contains("frame of 4294967295 bytes"));
    }
}
