//! The state digest: one SHA-256 over the whole replicated state at one applied log id, so that
//! an operator (or a test) can check that the members of a cluster hold the same state.
//!
//! Read from one pinned read transaction, so the applied log id and the hash describe the same
//! state. The input is every row of every state table, tables in a fixed order and rows in key
//! order, each as `table tag (u8) ‖ key length (u32 BE) ‖ key ‖ value length (u32 BE) ‖ value`,
//! without the node's own `meta` keys (the schema version). One exception: the events table
//! counts one row per event (key `queue 0 job_set 0 seq`, value the event's record) instead of
//! one per chunk, because how events fall into chunks follows how entries were batched into
//! apply transactions, which differs from member to member. The digest is never stored: it only
//! has to agree between members running the same release.

use super::codec::decode_row;
use super::tables::*;
use super::{Store, StoreError};
use crate::record::raft::LogIdRecord;
use crate::record::{EventRecord, decode};
use redb::ReadableTable;

/// The digest of the state at an applied log id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StateDigest {
    /// The last Raft log id the state includes.
    pub applied: Option<LogIdRecord>,
    /// SHA-256 of the state's rows (see the module docs).
    pub sha256: [u8; 32],
    /// Rows hashed (events counted one by one).
    pub rows: u64,
}

impl StateDigest {
    /// The applied log index (0 before any entry).
    pub fn applied_index(&self) -> u64 {
        self.applied.map_or(0, |l| l.index)
    }

    /// The hash in lower-case hex.
    pub fn hex(&self) -> String {
        self.sha256.iter().map(|b| format!("{b:02x}")).collect()
    }
}

/// Tags of the tables in the digest's input.
#[derive(Clone, Copy)]
#[repr(u8)]
enum Tag {
    Meta = 1,
    Queues = 2,
    Jobs = 3,
    Payloads = 4,
    LiveJobs = 5,
    JobSets = 6,
    Events = 7,
    EventSeqs = 8,
    ClientIds = 9,
    Executors = 10,
    Finished = 11,
    NodeHealth = 12,
    RunJobs = 13,
    JobOwners = 14,
    RunUsage = 15,
    JobPolicies = 16,
}

struct Hasher {
    ctx: ring::digest::Context,
    rows: u64,
}

impl Hasher {
    fn row(&mut self, tag: Tag, key: &[u8], value: &[u8]) {
        self.ctx.update(&[tag as u8]);
        // Lengths as u32: keys and values are far below 4 GiB (redb's own limit is 3 GiB).
        self.ctx.update(&(key.len() as u32).to_be_bytes());
        self.ctx.update(key);
        self.ctx.update(&(value.len() as u32).to_be_bytes());
        self.ctx.update(value);
        self.rows += 1;
    }
}

impl Store {
    /// The digest of the state as it is now (one pinned read transaction).
    pub fn digest(&self) -> Result<StateDigest, StoreError> {
        digest_of(&self.read()?)
    }
}

fn digest_of(tx: &redb::ReadTransaction) -> Result<StateDigest, StoreError> {
    let mut h = Hasher { ctx: ring::digest::Context::new(&ring::digest::SHA256), rows: 0 };
    let meta = tx.open_table(META)?;
    let applied: Option<LogIdRecord> = match meta.get(RAFT_APPLIED)? {
        Some(v) => {
            decode(v.value()).map_err(|source| StoreError::Corrupt { what: format!("meta.{RAFT_APPLIED}"), source })?
        }
        None => None,
    };
    for row in meta.iter()? {
        let (k, v) = row?;
        if !is_node_local(k.value()) {
            h.row(Tag::Meta, k.value().as_bytes(), v.value());
        }
    }
    for row in tx.open_table(QUEUES)?.iter()? {
        let (k, v) = row?;
        h.row(Tag::Queues, k.value().as_bytes(), v.value());
    }
    for row in tx.open_table(JOBS)?.iter()? {
        let (k, v) = row?;
        h.row(Tag::Jobs, k.value(), v.value());
    }
    for row in tx.open_table(PAYLOADS)?.iter()? {
        let (k, v) = row?;
        h.row(Tag::Payloads, k.value(), v.value());
    }
    for row in tx.open_table(LIVE_JOBS)?.iter()? {
        h.row(Tag::LiveJobs, row?.0.value(), &[]);
    }
    for row in tx.open_table(JOB_SETS)?.iter()? {
        h.row(Tag::JobSets, row?.0.value(), &[]);
    }
    for row in tx.open_table(EVENTS)?.iter()? {
        let (k, v) = row?;
        let key = k.value();
        // `queue 0 job_set 0 first_seq(8)`: the job set's prefix is all but the last 9 bytes.
        let Some(prefix) = key.len().checked_sub(9).map(|n| &key[..n]) else {
            return Err(StoreError::Malformed {
                what: "an event chunk key".into(),
                detail: "shorter than 9 bytes".into(),
            });
        };
        let events: Vec<EventRecord> = decode_row(v.value(), || "an event chunk".into())?;
        for e in &events {
            let value = crate::record::encode(e).map_err(|source| StoreError::Encode { what: "event", source })?;
            h.row(Tag::Events, &event_key(prefix, e.seq), &value);
        }
    }
    for row in tx.open_table(EVENT_SEQS)?.iter()? {
        let (k, v) = row?;
        h.row(Tag::EventSeqs, k.value(), &v.value().to_be_bytes());
    }
    for row in tx.open_table(CLIENT_IDS)?.iter()? {
        let (k, v) = row?;
        h.row(Tag::ClientIds, k.value(), v.value());
    }
    for row in tx.open_table(EXECUTORS)?.iter()? {
        let (k, v) = row?;
        h.row(Tag::Executors, k.value().as_bytes(), v.value());
    }
    for row in tx.open_table(FINISHED)?.iter()? {
        h.row(Tag::Finished, row?.0.value(), &[]);
    }
    for row in tx.open_table(NODE_HEALTH)?.iter()? {
        let (k, v) = row?;
        h.row(Tag::NodeHealth, k.value(), v.value());
    }
    for row in tx.open_table(RUN_JOBS)?.iter()? {
        let (k, v) = row?;
        h.row(Tag::RunJobs, k.value(), v.value());
    }
    for row in tx.open_table(JOB_OWNERS)?.iter()? {
        let (k, v) = row?;
        h.row(Tag::JobOwners, k.value(), v.value().as_bytes());
    }
    for row in tx.open_table(RUN_USAGE)?.iter()? {
        let (k, v) = row?;
        h.row(Tag::RunUsage, k.value(), v.value());
    }
    for row in tx.open_table(JOB_POLICIES)?.iter()? {
        let (k, v) = row?;
        h.row(Tag::JobPolicies, k.value(), v.value());
    }
    let mut sha256 = [0u8; 32];
    sha256.copy_from_slice(h.ctx.finish().as_ref());
    Ok(StateDigest { applied, sha256, rows: h.rows })
}
