//! The spill journal: request-log rows on disk while the store refuses them, replayed into
//! the store once it takes writes again.
//!
//! One JSON row a line, append-only, capped at `[log] spill_bytes`. Everything before
//! `stored` is known to be in the store; once all of it is, the file is cut back to empty.
//! Replaying a row twice is harmless, since the store skips ids it holds: so after a crash
//! the whole file is replayed, and a row half-written by a crash is cut off when it opens.

use std::fs::{File, OpenOptions};
use std::io::{self, BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use crate::store::request_log::LogRow;

/// Why a batch could not be appended.
#[derive(Debug, thiserror::Error)]
pub enum AppendError {
    #[error("the spill journal is full ({len} of {cap} bytes)")]
    Full { len: u64, cap: u64 },
    #[error("the spill journal cannot be written: {0}")]
    Io(#[from] io::Error),
}

/// Rows read back from the journal, and where reading stopped.
pub struct Pending {
    pub rows: Vec<LogRow>,
    /// The offset just past the last line read.
    pub end: u64,
    /// Lines that did not parse: lost, and counted.
    pub unreadable: u64,
}

/// The journal file and how far it is stored.
pub struct Journal {
    path: PathBuf,
    /// Opened for appending on first use.
    file: Option<File>,
    len: u64,
    stored: u64,
    cap: u64,
}

impl Journal {
    /// Opens the journal at `path`: rows a previous run left there are pending.
    pub fn open(path: PathBuf, cap: u64) -> Journal {
        let len = match complete_length(&path) {
            Ok(len) => len,
            Err(error) => {
                if error.kind() != io::ErrorKind::NotFound {
                    tracing::warn!(%error, path = %path.display(), "cannot read the spill journal");
                }
                0
            }
        };
        let mut journal = Journal {
            path,
            file: None,
            len,
            stored: 0,
            cap,
        };
        if len > 0 {
            // Cut a line a crash left half-written, so appends start on a line of their own.
            if let Err(error) = journal.file().and_then(|f| f.set_len(len)) {
                tracing::warn!(%error, "cannot trim the spill journal");
            }
            tracing::info!(bytes = len, path = %journal.path.display(), "replaying the spill journal");
        }
        journal
    }

    /// Its size in bytes.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether it holds rows the store may not have.
    pub fn pending(&self) -> bool {
        self.stored < self.len
    }

    /// Whether everything in it is stored up to here.
    pub fn stored_up_to(&self) -> u64 {
        self.stored
    }

    fn file(&mut self) -> io::Result<&mut File> {
        if self.file.is_none() {
            let file = OpenOptions::new()
                .create(true)
                .append(true)
                .open(&self.path)?;
            self.file = Some(file);
        }
        // Just set when it was empty.
        self.file
            .as_mut()
            .ok_or_else(|| io::Error::other("the journal did not open"))
    }

    /// Appends rows, one line each; with `sync`, waits until they are on disk.
    pub fn append(&mut self, rows: &[LogRow], sync: bool) -> Result<(), AppendError> {
        let mut bytes = Vec::with_capacity(rows.len() * 512);
        for row in rows {
            // Plain strings and numbers always serialise.
            if serde_json::to_writer(&mut bytes, row).is_ok() {
                bytes.push(b'\n');
            }
        }
        let (len, cap) = (self.len, self.cap);
        if len + bytes.len() as u64 > cap {
            return Err(AppendError::Full { len, cap });
        }
        let file = self.file()?;
        let written = file
            .write_all(&bytes)
            .and_then(|()| if sync { file.sync_data() } else { Ok(()) });
        if let Err(error) = written {
            // Cut whatever part went in, so the next append starts on a whole line.
            let _ = file.set_len(len);
            return Err(AppendError::Io(error));
        }
        self.len += bytes.len() as u64;
        Ok(())
    }

    /// Reads up to `max` rows from the first one not known to be stored.
    pub fn read_pending(&self, max: usize) -> io::Result<Pending> {
        let mut reader = BufReader::new(File::open(&self.path)?);
        reader.seek(SeekFrom::Start(self.stored))?;
        let mut pending = Pending {
            rows: Vec::new(),
            end: self.stored,
            unreadable: 0,
        };
        let mut line = Vec::new();
        while pending.rows.len() < max && pending.end < self.len {
            line.clear();
            let read = reader.read_until(b'\n', &mut line)?;
            if read == 0 || line.last() != Some(&b'\n') {
                // Nothing past `len` was ever acknowledged; stop at the last whole line.
                break;
            }
            pending.end += read as u64;
            match serde_json::from_slice::<LogRow>(&line) {
                Ok(row) => pending.rows.push(row),
                Err(_) => pending.unreadable += 1,
            }
        }
        if pending.rows.is_empty() && pending.unreadable == 0 && pending.end < self.len {
            // A tail that is no whole line: nothing in it can be read, ever.
            pending.unreadable += 1;
            pending.end = self.len;
        }
        Ok(pending)
    }

    /// Notes that everything before `end` is in the store; empties the file once all is.
    pub fn mark_stored(&mut self, end: u64) {
        self.stored = end.min(self.len);
        if self.stored == self.len && self.len > 0 {
            match self.file().and_then(|f| f.set_len(0)) {
                Ok(()) => {
                    self.len = 0;
                    self.stored = 0;
                }
                Err(error) => tracing::warn!(%error, "cannot empty the spill journal"),
            }
        }
    }

    /// Removes the file when nothing is left in it (at shutdown).
    pub fn close(self) {
        if self.len == 0 {
            drop(self.file);
            if let Err(error) = std::fs::remove_file(&self.path)
                && error.kind() != io::ErrorKind::NotFound
            {
                tracing::warn!(%error, "cannot remove the empty spill journal");
            }
        } else {
            tracing::warn!(
                bytes = self.len - self.stored,
                path = %self.path.display(),
                "request-log rows stay in the spill journal; the next start replays them"
            );
        }
    }
}

/// The file's length up to and including its last newline.
fn complete_length(path: &Path) -> io::Result<u64> {
    let mut file = File::open(path)?;
    let len = file.metadata()?.len();
    let mut end = len;
    let mut chunk = vec![0u8; 64 * 1024];
    while end > 0 {
        let start = end.saturating_sub(chunk.len() as u64);
        let size = (end - start) as usize;
        file.seek(SeekFrom::Start(start))?;
        file.read_exact(&mut chunk[..size])?;
        if let Some(at) = chunk[..size].iter().rposition(|b| *b == b'\n') {
            return Ok(start + at as u64 + 1);
        }
        end = start;
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Store;
    use crate::store::request_log::LogQuery;

    fn row(id: &str) -> LogRow {
        LogRow {
            id: id.into(),
            time_ms: crate::store::now_ms(),
            key_id: None,
            user: None,
            route: Some("r".into()),
            outcome: "success".into(),
            step: Some(0),
            provider: None,
            model: None,
            attempts: vec![],
            status: 200,
            latency_ms: 3.0,
            ttft_ms: None,
            overhead_ms: 0.1,
            tokens_in: None,
            tokens_out: None,
            cost_usd: None,
            stream: false,
            partial: false,
            error: None,
            cache: None,
            trace_id: None,
        }
    }

    fn temp_path() -> PathBuf {
        std::env::temp_dir().join(format!("switchyard-journal-{}", uuid::Uuid::now_v7()))
    }

    async fn replay(journal: &mut Journal, store: &Store) {
        while journal.pending() {
            let pending = journal.read_pending(2).unwrap();
            store.insert_log(pending.rows).await.unwrap();
            journal.mark_stored(pending.end);
        }
    }

    #[tokio::test]
    async fn replaying_twice_stores_each_row_once() {
        let path = temp_path();
        let store = Store::open("sqlite::memory:").await.unwrap();
        let rows: Vec<LogRow> = (0..5).map(|i| row(&format!("r{i}"))).collect();
        let mut journal = Journal::open(path.clone(), 1 << 20);
        journal.append(&rows, true).unwrap();
        // A crash after the rows were stored but before the journal was emptied: the next
        // start replays the same rows again.
        replay(&mut journal, &store).await;
        assert_eq!(journal.len(), 0, "emptied once all is stored");
        journal.append(&rows, false).unwrap();
        drop(journal);
        let mut again = Journal::open(path.clone(), 1 << 20);
        assert!(again.pending());
        replay(&mut again, &store).await;
        let stored = store.query_log(LogQuery::default()).await.unwrap();
        let ids: Vec<_> = stored.iter().map(|r| r.id.as_str()).collect();
        assert_eq!(ids, ["r0", "r1", "r2", "r3", "r4"]);
        again.close();
        assert!(!path.exists(), "an empty journal is removed at shutdown");
    }

    #[test]
    fn a_half_written_line_is_cut_and_the_cap_holds() {
        let path = temp_path();
        let mut journal = Journal::open(path.clone(), 4096);
        journal.append(&[row("a")], false).unwrap();
        let whole = journal.len();
        // A crash mid-append leaves a line with no end.
        let mut file = OpenOptions::new().append(true).open(&path).unwrap();
        file.write_all(b"{\"id\":\"b\",\"ti").unwrap();
        drop((file, journal));
        let mut journal = Journal::open(path.clone(), 4096);
        assert_eq!(journal.len(), whole);
        journal.append(&[row("c")], false).unwrap();
        let pending = journal.read_pending(10).unwrap();
        let ids: Vec<_> = pending.rows.iter().map(|r| r.id.as_str()).collect();
        assert_eq!((ids, pending.unreadable), (vec!["a", "c"], 0));
        let many: Vec<LogRow> = (0..20).map(|i| row(&format!("x{i}"))).collect();
        assert!(matches!(
            journal.append(&many, false),
            Err(AppendError::Full { .. })
        ));
        assert_eq!(std::fs::metadata(&path).unwrap().len(), journal.len());
        let _ = std::fs::remove_file(&path);
    }
}
