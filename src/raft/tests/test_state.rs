//! A small [`ReplicatedState`] for tests: `CreateQueue` stores the queue name in a redb table;
//! other commands are refused. Applies commit with `Durability::None`, like the server's state.

use crate::raft::io::io_err;
use crate::raft::{ApplyItem, ApplyPayload, LogId, ReplicatedState, SnapshotMeta, StateExport, StoredMembership};
use crate::record::{FrameSink, FrameSource};
use crate::state::{Command, Rejection, Response};
use redb::{Database, Durability, ReadableDatabase, ReadableTable, TableDefinition};
use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

// A test state may store openraft's types with openraft's own serde; the server's state does not.
fn encode<T: serde::Serialize>(v: &T) -> io::Result<Vec<u8>> {
    crate::record::encode(v).map_err(io::Error::other)
}

fn decode<T: serde::de::DeserializeOwned>(b: &[u8]) -> io::Result<T> {
    crate::record::decode(b).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

const QUEUES: TableDefinition<&str, ()> = TableDefinition::new("test_queues");
const APPLIED: TableDefinition<&str, &[u8]> = TableDefinition::new("test_applied");
const KEY_LAST_APPLIED: &str = "last_applied";
const KEY_MEMBERSHIP: &str = "membership";

/// Queue names in a redb table, plus the applied log id and membership.
pub(crate) struct QueueNames {
    db: Arc<Database>,
    /// How many snapshots were imported (shared with the test).
    pub imports: Arc<AtomicUsize>,
    /// The trait methods that changed or exported state, in call order (shared with the test).
    pub calls: Arc<Mutex<Vec<&'static str>>>,
    /// Refuse every snapshot as of another format (as after an upgrade of the state's format).
    pub refuse_snapshots: bool,
}

impl QueueNames {
    /// A state machine over `db`, creating its tables if they are missing.
    pub(crate) fn open(db: Arc<Database>) -> io::Result<Self> {
        let tx = db.begin_write().map_err(io_err)?;
        tx.open_table(QUEUES).map_err(io_err)?;
        tx.open_table(APPLIED).map_err(io_err)?;
        tx.commit().map_err(io_err)?;
        Ok(Self {
            db,
            imports: Arc::new(AtomicUsize::new(0)),
            calls: Arc::new(Mutex::new(Vec::new())),
            refuse_snapshots: false,
        })
    }

    /// The queue names stored in `db`, in order.
    pub(crate) fn names(db: &Database) -> io::Result<Vec<String>> {
        let tx = db.begin_read().map_err(io_err)?;
        let t = tx.open_table(QUEUES).map_err(io_err)?;
        let mut out = Vec::new();
        for item in t.iter().map_err(io_err)? {
            out.push(item.map_err(io_err)?.0.value().to_string());
        }
        Ok(out)
    }

    fn record(&self, call: &'static str) {
        if let Ok(mut calls) = self.calls.lock() {
            calls.push(call);
        }
    }

    fn read_applied(&self, tx: &redb::ReadTransaction) -> io::Result<(Option<LogId>, StoredMembership)> {
        let t = tx.open_table(APPLIED).map_err(io_err)?;
        let last = match t.get(KEY_LAST_APPLIED).map_err(io_err)? {
            Some(v) => decode(v.value())?,
            None => None,
        };
        let membership = match t.get(KEY_MEMBERSHIP).map_err(io_err)? {
            Some(v) => decode(v.value())?,
            None => StoredMembership::default(),
        };
        Ok((last, membership))
    }
}

impl ReplicatedState for QueueNames {
    fn apply(&mut self, items: Vec<ApplyItem>) -> io::Result<Vec<Response>> {
        self.record("apply");
        let mut tx = self.db.begin_write().map_err(io_err)?;
        tx.set_durability(Durability::None).map_err(io_err)?;
        let mut responses = Vec::with_capacity(items.len());
        {
            let mut queues = tx.open_table(QUEUES).map_err(io_err)?;
            let mut applied = tx.open_table(APPLIED).map_err(io_err)?;
            let mut last = None;
            for item in items {
                last = Some(item.log_id);
                responses.push(match item.payload {
                    ApplyPayload::Blank => Response::Ok,
                    ApplyPayload::Membership(m) => {
                        applied
                            .insert(KEY_MEMBERSHIP, encode(&StoredMembership::new(Some(item.log_id), m))?.as_slice())
                            .map_err(io_err)?;
                        Response::Ok
                    }
                    ApplyPayload::Command(Command::CreateQueue { queue, .. }) => {
                        queues.insert(queue.name.as_str(), ()).map_err(io_err)?;
                        Response::Ok
                    }
                    ApplyPayload::Command(_) => Response::Rejected(Rejection {
                        kind: crate::state::RejectKind::Invalid,
                        field: None,
                        message: "test state only creates queues".into(),
                    }),
                });
            }
            applied.insert(KEY_LAST_APPLIED, encode(&last)?.as_slice()).map_err(io_err)?;
        }
        tx.commit().map_err(io_err)?;
        Ok(responses)
    }

    fn applied_state(&self) -> io::Result<(Option<LogId>, StoredMembership)> {
        let tx = self.db.begin_read().map_err(io_err)?;
        self.read_applied(&tx)
    }

    fn make_durable(&mut self) -> io::Result<()> {
        self.record("make_durable");
        let mut tx = self.db.begin_write().map_err(io_err)?;
        tx.set_durability(Durability::Immediate).map_err(io_err)?;
        tx.commit().map_err(io_err)
    }

    fn export(&mut self) -> io::Result<StateExport> {
        self.record("export");
        let tx = self.db.begin_read().map_err(io_err)?;
        let (last_applied, membership) = self.read_applied(&tx)?;
        Ok(StateExport {
            last_applied,
            membership,
            // One frame per queue name.
            rows: Box::new(move |out: &mut dyn FrameSink| {
                let t = tx.open_table(QUEUES).map_err(io_err)?;
                for item in t.iter().map_err(io_err)? {
                    out.frame(item.map_err(io_err)?.0.value().as_bytes())?;
                }
                Ok(())
            }),
        })
    }

    fn import(&mut self, meta: &SnapshotMeta, frames: &mut dyn FrameSource) -> io::Result<()> {
        self.record("import");
        // A test state: one transaction, so a failure part-way commits nothing.
        let tx = self.db.begin_write().map_err(io_err)?;
        {
            let mut queues = tx.open_table(QUEUES).map_err(io_err)?;
            queues.retain(|_, _| false).map_err(io_err)?;
            while let Some(frame) = frames.next_frame()? {
                let name = std::str::from_utf8(frame).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
                queues.insert(name, ()).map_err(io_err)?;
            }
            let mut applied = tx.open_table(APPLIED).map_err(io_err)?;
            applied.insert(KEY_LAST_APPLIED, encode(&meta.last_log_id)?.as_slice()).map_err(io_err)?;
            applied.insert(KEY_MEMBERSHIP, encode(&meta.last_membership)?.as_slice()).map_err(io_err)?;
        }
        tx.commit().map_err(io_err)?;
        self.imports.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }

    /// Older test snapshots were the encoded list of names.
    fn convert_legacy_snapshot(&self, data: &[u8], out: &mut dyn FrameSink) -> io::Result<()> {
        let names: Vec<String> = decode(data)?;
        for n in &names {
            out.frame(n.as_bytes())?;
        }
        Ok(())
    }

    fn reads_snapshot(&self, _frames: &mut dyn FrameSource) -> io::Result<bool> {
        Ok(!self.refuse_snapshots)
    }
}
