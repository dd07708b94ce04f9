//! Output being followed (leader-local, not replicated): what agents sent of the runs someone
//! follows, and which runs' agents should be asked for more.
//!
//! A follower asks [`LiveOutput::want`]; the executor's next lease poll answers with the runs
//! wanted ([`LiveOutput::asks_for`]), at most one ask per run every [`ASK_EVERY`]; the agent sends
//! what it has ([`LiveOutput::receive`]), which wakes the followers. Output nobody asked about for
//! [`KEEP_FOR`] is dropped.

use crate::model::api::{OutputChunk, OutputStream, OutputWanted};
use crate::model::{ExecutorName, RunId};
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// Shortest time between two asks for the same run's output: a followed run makes its agent poll
/// about twice a second.
pub(crate) const ASK_EVERY: Duration = Duration::from_millis(500);
/// A run's output is asked for while someone asked within this long.
pub(crate) const WANTED_FOR: Duration = Duration::from_secs(15);
/// Output kept this long after the last follower's request.
pub(crate) const KEEP_FOR: Duration = Duration::from_secs(60);
/// A piece at least this large is asked on from at once, not after [`ASK_EVERY`].
pub(crate) const FAST_ASK_BYTES: usize = 64 * 1024;
/// Text kept per followed stream; older pieces are dropped first.
pub(crate) const KEPT_BYTES: usize = 1024 * 1024;

/// What followers get back.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Piece {
    /// Offset of the first byte of `data`.
    pub from: u64,
    /// Offset after the last byte.
    pub to: u64,
    /// The text.
    pub data: String,
    /// The stream will not grow.
    pub done: bool,
    /// Why there is no output (the agent said so).
    pub unavailable: Option<String>,
}

struct Followed {
    executor: ExecutorName,
    /// Contiguous pieces as the agent sent them.
    pieces: VecDeque<OutputChunk>,
    kept: usize,
    /// The offset the next ask starts at (None: the last lines).
    next_ask: Option<u64>,
    done: bool,
    unavailable: Option<String>,
    wanted_until: Instant,
    asked_at: Option<Instant>,
    /// The agent answered the last ask: the next may go at once (reading an ended run's whole
    /// output goes at the pace of the agent's answers, not one piece per [`ASK_EVERY`]).
    answered: bool,
    notify: Arc<Notify>,
}

impl Followed {
    fn end(&self) -> Option<u64> {
        self.pieces.back().map(|p| p.to)
    }

    /// What the pieces hold from `from` (from the start of the piece holding it); None: from
    /// is not yet there. A `from` before the first piece kept starts at the first piece
    /// ([`LiveOutput::want`] asks again from there first).
    fn read(&self, from: Option<u64>) -> Option<Piece> {
        let (first, end) = (self.pieces.front()?.from, self.end()?);
        let from = from.unwrap_or(first);
        if from >= end && !(self.done && from == end) {
            return None;
        }
        let mut out = Piece { from: end, to: end, done: self.done, ..Piece::default() };
        for p in self.pieces.iter().filter(|p| p.to > from.max(first)) {
            if out.data.is_empty() {
                out.from = p.from;
            }
            out.data.push_str(&p.data);
        }
        Some(out)
    }
}

/// The output being followed, by run and stream.
#[derive(Default)]
pub(crate) struct LiveOutput {
    runs: Mutex<HashMap<(RunId, OutputStream), Followed>>,
}

impl LiveOutput {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(RunId, OutputStream), Followed>> {
        self.runs.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A follower wants the stream of `run` (on `executor`) from `from` (None: its last lines):
    /// what is already there, or the signal that fires when more arrives.
    pub(crate) fn want(
        &self,
        run: RunId,
        stream: OutputStream,
        executor: &ExecutorName,
        from: Option<u64>,
        now: Instant,
    ) -> Result<Piece, Arc<Notify>> {
        let mut runs = self.lock();
        runs.retain(|_, f| f.wanted_until + KEEP_FOR > now);
        let f = runs.entry((run, stream)).or_insert_with(|| Followed {
            executor: executor.clone(),
            pieces: VecDeque::new(),
            kept: 0,
            next_ask: from,
            done: false,
            unavailable: None,
            wanted_until: now,
            asked_at: None,
            answered: false,
            notify: Arc::new(Notify::new()),
        });
        f.wanted_until = now + WANTED_FOR;
        // Asked from before what is kept (a reader of an ended run's whole output after someone
        // followed its last lines): start again from there rather than skip the beginning.
        if let (Some(x), Some(first)) = (from, f.pieces.front().map(|p| p.from))
            && x < first
            && f.unavailable.is_none()
        {
            f.pieces.clear();
            f.kept = 0;
            f.done = false;
            f.next_ask = Some(x);
        }
        if let Some(why) = &f.unavailable {
            let at = from.unwrap_or(0);
            return Ok(Piece { from: at, to: at, done: true, unavailable: Some(why.clone()), data: String::new() });
        }
        if let Some(piece) = f.read(from) {
            return Ok(piece);
        }
        // Nothing there yet: ask from where this follower is, unless the pieces already lead
        // there (then the next ask continues from their end).
        if f.end().is_none_or(|end| from.is_some_and(|x| x > end)) {
            f.next_ask = from;
            if f.end().is_some() {
                f.pieces.clear();
                f.kept = 0;
            }
        }
        Err(f.notify.clone())
    }

    /// Whether a lease poll of `executor` should be answered soon because output of its runs is
    /// wanted: the time at which an ask is due, if any.
    pub(crate) fn next_ask(&self, executor: &ExecutorName, now: Instant) -> Option<Instant> {
        self.lock()
            .values()
            .filter(|f| &f.executor == executor && f.wanted_until > now && !f.done && f.unavailable.is_none())
            .map(|f| if f.answered { now } else { f.asked_at.map_or(now, |a| a + ASK_EVERY) })
            .min()
    }

    /// The asks due for `executor`'s runs now; each is recorded as asked.
    pub(crate) fn asks_for(&self, executor: &ExecutorName, now: Instant) -> Vec<OutputWanted> {
        let mut out = Vec::new();
        for ((run_id, stream), f) in self.lock().iter_mut() {
            let due = f.answered || f.asked_at.is_none_or(|a| a + ASK_EVERY <= now);
            if &f.executor == executor && f.wanted_until > now && !f.done && f.unavailable.is_none() && due {
                f.asked_at = Some(now);
                f.answered = false;
                out.push(OutputWanted { run_id: *run_id, stream: *stream, from: f.end().or(f.next_ask) });
            }
        }
        out.sort_by_key(|w| (w.run_id, w.stream.as_str()));
        out
    }

    /// Takes what `executor`'s agent sent; pieces of runs nobody follows, of another executor,
    /// or that do not continue what is kept are dropped. Returns how many were taken.
    pub(crate) fn receive(&self, executor: &ExecutorName, chunks: Vec<OutputChunk>) -> usize {
        let mut taken = 0;
        let mut runs = self.lock();
        for c in chunks {
            let Some(f) = runs.get_mut(&(c.run_id, c.stream)) else { continue };
            if &f.executor != executor || c.to < c.from {
                continue;
            }
            if let Some(why) = c.unavailable {
                f.unavailable = Some(why);
            } else {
                match f.end() {
                    Some(end) if c.from != end => continue,
                    _ => {}
                }
                f.done |= c.done;
                // A large piece: there is likely more behind it, worth asking for at once.
                f.answered = c.data.len() >= FAST_ASK_BYTES;
                if c.to > c.from || f.pieces.is_empty() {
                    f.kept += c.data.len();
                    f.pieces.push_back(c);
                }
                while f.kept > KEPT_BYTES && f.pieces.len() > 1 {
                    if let Some(p) = f.pieces.pop_front() {
                        f.kept -= p.data.len();
                    }
                }
            }
            f.notify.notify_waiters();
            taken += 1;
        }
        taken
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(run: RunId, from: u64, data: &str, done: bool) -> OutputChunk {
        OutputChunk {
            run_id: run,
            stream: OutputStream::Stdout,
            from,
            to: from + data.len() as u64,
            data: data.into(),
            done,
            unavailable: None,
        }
    }

    #[test]
    fn a_follower_is_asked_for_then_gets_what_the_agent_sent_in_order() {
        let live = LiveOutput::default();
        let (e, other) = (ExecutorName::new("e").expect("name"), ExecutorName::new("f").expect("name"));
        let run = RunId::from_parts(1, 1);
        let t0 = Instant::now();
        assert!(live.want(run, OutputStream::Stdout, &e, Some(0), t0).is_err(), "nothing yet");
        assert_eq!(live.next_ask(&e, t0), Some(t0));
        assert_eq!(live.next_ask(&other, t0), None);
        let asks = live.asks_for(&e, t0);
        assert_eq!(asks, vec![OutputWanted { run_id: run, stream: OutputStream::Stdout, from: Some(0) }]);
        // Asked once per ASK_EVERY.
        assert!(live.asks_for(&e, t0 + Duration::from_millis(100)).is_empty());
        // Another executor's pieces, and pieces that do not continue, are dropped.
        assert_eq!(live.receive(&other, vec![chunk(run, 0, "x", false)]), 0);
        assert_eq!(live.receive(&e, vec![chunk(run, 0, "hello ", false)]), 1);
        assert_eq!(live.receive(&e, vec![chunk(run, 9, "gap", false)]), 0);
        assert_eq!(live.receive(&e, vec![chunk(run, 6, "world\n", false)]), 1);
        let p = live.want(run, OutputStream::Stdout, &e, Some(0), t0).expect("there");
        assert_eq!((p.from, p.to, p.data.as_str(), p.done), (0, 12, "hello world\n", false));
        let p = live.want(run, OutputStream::Stdout, &e, Some(6), t0).expect("there");
        assert_eq!((p.from, p.data.as_str()), (6, "world\n"));
        // At the end: wait, and the next ask continues from there.
        assert!(live.want(run, OutputStream::Stdout, &e, Some(12), t0).is_err());
        let asks = live.asks_for(&e, t0 + ASK_EVERY);
        assert_eq!(asks[0].from, Some(12));
        live.receive(&e, vec![chunk(run, 12, "", true)]);
        let p = live.want(run, OutputStream::Stdout, &e, Some(12), t0).expect("done");
        assert!(p.done && p.data.is_empty());
        // A finished run is not asked for again.
        assert!(live.asks_for(&e, t0 + ASK_EVERY * 4).is_empty());
        // Nobody asking for KEEP_FOR: forgotten.
        let later = t0 + WANTED_FOR + KEEP_FOR + Duration::from_secs(1);
        assert!(live.want(RunId::from_parts(1, 2), OutputStream::Stdout, &e, None, later).is_err());
        assert_eq!(live.lock().len(), 1);
    }

    #[test]
    fn an_agent_without_output_says_so_and_kept_text_is_bounded() {
        let live = LiveOutput::default();
        let e = ExecutorName::new("e").expect("name");
        let run = RunId::from_parts(1, 1);
        let now = Instant::now();
        let _ = live.want(run, OutputStream::Stderr, &e, None, now);
        let mut c = chunk(run, 0, "", false);
        c.stream = OutputStream::Stderr;
        c.unavailable = Some("this runtime keeps no output".into());
        live.receive(&e, vec![c]);
        let p = live.want(run, OutputStream::Stderr, &e, None, now).expect("answer");
        assert_eq!(p.unavailable.as_deref(), Some("this runtime keeps no output"));
        assert!(p.done);
        // 3 MiB in 64 KiB pieces: about KEPT_BYTES kept, the latest.
        let _ = live.want(run, OutputStream::Stdout, &e, Some(0), now);
        let piece = "x".repeat(64 * 1024);
        for i in 0..48u64 {
            live.receive(&e, vec![chunk(run, i * 65536, &piece, false)]);
        }
        let p = live.want(run, OutputStream::Stdout, &e, None, now).expect("there");
        assert!(p.data.len() <= KEPT_BYTES && p.data.len() >= KEPT_BYTES - 65536, "{}", p.data.len());
        assert_eq!(p.to, 48 * 65536);
        assert_eq!(p.from, p.to - p.data.len() as u64);
        // A reader from before what is kept is not handed the middle: the agent is asked again
        // from where it is.
        assert!(live.want(run, OutputStream::Stdout, &e, Some(0), now).is_err());
        let asks = live.asks_for(&e, now + ASK_EVERY);
        assert_eq!(asks, vec![OutputWanted { run_id: run, stream: OutputStream::Stdout, from: Some(0) }]);
    }
}
