//! [`SnapshotFile`]: a snapshot's bytes in a file, the handle openraft streams in chunks to a
//! member that must catch up by snapshot (the `SnapshotData` of [`super::types::TypeConfig`]).
//! Where the files live and which is current is [`super::snapshot_store`].

use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncSeek, AsyncWrite, ReadBuf};

/// A snapshot's bytes in a file: what openraft reads chunks from when it sends a snapshot, and
/// writes received chunks into. A file being received is removed when its handle is dropped
/// before it is installed (e.g. the leader gave up and will start another).
#[derive(Debug)]
pub(crate) struct SnapshotFile {
    file: tokio::fs::File,
    path: PathBuf,
    remove_on_drop: bool,
}

impl SnapshotFile {
    /// A finished snapshot file already open (for reading) at `path`.
    pub(crate) fn from_std(file: std::fs::File, path: PathBuf) -> Self {
        Self { file: tokio::fs::File::from_std(file), path, remove_on_drop: false }
    }

    /// Creates a temporary file to receive a snapshot into.
    pub(crate) async fn create_temp(path: PathBuf) -> io::Result<Self> {
        let file = tokio::fs::File::options().read(true).write(true).create_new(true).open(&path).await?;
        Ok(Self { file, path, remove_on_drop: true })
    }

    /// Where the file is.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// True for a temporary file of this node's that nothing else refers to (one being
    /// received): an install may move it into place instead of copying it.
    pub(crate) fn is_temporary(&self) -> bool {
        self.remove_on_drop
    }

    /// Writes out what is buffered and hands over the file; a temporary file is then the
    /// caller's to move or remove.
    pub(crate) async fn into_std(mut self) -> io::Result<(std::fs::File, PathBuf)> {
        use tokio::io::AsyncWriteExt;
        self.file.flush().await?;
        self.remove_on_drop = false;
        let path = std::mem::take(&mut self.path);
        let file = self.file.try_clone().await?.into_std().await;
        Ok((file, path))
    }
}

impl Drop for SnapshotFile {
    fn drop(&mut self) {
        if self.remove_on_drop {
            // Best effort: a leftover is removed at the next start anyway.
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

impl AsyncRead for SnapshotFile {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.file).poll_read(cx, buf)
    }
}

impl AsyncWrite for SnapshotFile {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.file).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.file).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.file).poll_shutdown(cx)
    }
}

impl AsyncSeek for SnapshotFile {
    fn start_seek(mut self: Pin<&mut Self>, position: io::SeekFrom) -> io::Result<()> {
        Pin::new(&mut self.file).start_seek(position)
    }

    fn poll_complete(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<u64>> {
        Pin::new(&mut self.file).poll_complete(cx)
    }
}
