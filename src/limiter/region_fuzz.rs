//! Any bytes in a region file: no open, decision, summary or `inspect` may hang, abort, panic or
//! touch memory out of bounds. Each case corrupts one part of a live region (random bytes, numbers
//! at the edges, whole lines of garbage) and runs a worker's work on it in a forked child, so that a
//! crash or a hang is observed rather than suffered: the child must exit, by itself, with success or
//! a returned error.
//!
//! `RK_FUZZ_SEED=N` runs one seed (printed with every failure); `RK_FUZZ_CASES` sets the cases per
//! seed. The template region gets random hash seeds each run, so a failing case's file is kept (its
//! path is printed) to replay it: `RK_FUZZ_REPLAY=FILE`.

use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::algorithm::{Kind, Limit};
use crate::clock::{kernel_now_ns, Clock, ManualClock, RegionClock, DRIFT_BOUND_NS};
use crate::config::{Config, RuleSpec, RulesConfig};
use crate::limiter::{Limiter, Request, Take, Target};

use crate::state_map::region::file::HEADER_BYTES;
use crate::state_map::region::layout::SharedRegion;

const MAX_KEYS: usize = 1_000;
const LOG_ENTRIES: usize = 1_000;
/// How long a case may take before it is looked at again, with `PATIENCE`: only a case that still
/// has not ended then hangs (a slow or busy machine only makes cases slow).
const FIRST_LOOK: Duration = Duration::from_secs(1);
const PATIENCE: Duration = Duration::from_secs(30);
/// Exit codes of the child.
const REFUSED: i32 = 3;
const ABSURD: i32 = 5;
const PANICKED: i32 = 101;

/// splitmix64: small, and the same sequence for a seed everywhere.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    #[allow(clippy::cast_possible_truncation)]
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    fn bytes(&mut self, len: usize) -> Vec<u8> {
        (0..len).map(|_| self.next().to_le_bytes()[0]).collect()
    }
}

fn rules() -> Vec<RuleSpec> {
    let rate = |kind| Limit::new("5/min".parse().unwrap(), None, kind).unwrap();
    let mut gate = RuleSpec::single("^/c", "gate", rate(Kind::Gcra)).unwrap();
    gate.limits.push(Limit::concurrency(2).unwrap());
    vec![
        RuleSpec::single("^/g", "gcra", rate(Kind::Gcra)).unwrap(),
        RuleSpec::single("^/l", "log", Limit::new("20/min".parse().unwrap(), None, Kind::SlidingLog).unwrap()).unwrap(),
        RuleSpec::single("^/w", "window", rate(Kind::SlidingWindow)).unwrap(),
        gate,
    ]
}

fn limiter(path: &Path, clock: &Arc<ManualClock>) -> crate::error::Result<Limiter> {
    let config = Config {
        rules: RulesConfig { rules: rules(), ..RulesConfig::default() },
        max_keys: MAX_KEYS,
        ..Config::default()
    };
    let region = Arc::new(SharedRegion::open(path, MAX_KEYS, LOG_ENTRIES)?);
    Limiter::new(
        config,
        Clock::Manual(clock.clone()),
        crate::state_map::StatesIn::Region(region, crate::limiter::OnStall::Allow),
    )
}

const PATHS: [&str; 4] = ["/g", "/l", "/w", "/c"];

/// A region in use: states of every kind, sliding logs, permits held, refusals, rebuilds behind it.
fn template(path: &Path) {
    let clock = Arc::new(ManualClock::new(1_000_000_000));
    let lim = limiter(path, &clock).unwrap();
    for round in 0..12 {
        for peer in 0..120 {
            let peer = format!("peer-{peer}");
            for target in PATHS {
                let request = Request::new(1).taking(Take::RatesAndPermits);
                let decision = lim.decide(&peer, Target::Path(Some(target)), request).unwrap();
                if target == "/c" && decision.outcome.allowed && round % 2 == 0 {
                    lim.release(&peer, Target::Path(Some(target)), 1).unwrap();
                }
            }
        }
        clock.advance_ns(700_000_000);
    }
}

/// A worker's work on the region at `path`: the child's exit code.
fn work(path: &Path) -> i32 {
    let clock = Arc::new(ManualClock::new(5_000_000_000));
    let Ok(lim) = limiter(path, &clock) else { return REFUSED };
    for peer in ["peer-1", "peer-7", "peer-33", "peer-118", "someone-new", "another"] {
        for target in PATHS {
            let request = Request::new(1).taking(Take::RatesAndPermits);
            if let Ok(decision) = lim.decide(peer, Target::Path(Some(target)), request) {
                if decision.outcome.allowed && target == "/c" {
                    let _ = lim.release(peer, Target::Path(Some(target)), 1);
                }
            }
        }
        clock.advance_ns(1_000_000);
    }
    let _ = lim.stats();
    let Some(summary) = lim.shared_summary() else { return 0 };
    let capacity = 2 * MAX_KEYS as u64; // more than the slots of every shard (1.14 x max_keys)
    if summary.keys > capacity || lim.len() as u64 > capacity {
        eprintln!("absurd: {} keys ({} by len)", summary.keys, lim.len());
        return ABSURD;
    }
    drop(lim);
    // The region's clock, whatever its record holds: healed, and within its bound of the kernel's.
    if let Ok(region) = SharedRegion::open(path, MAX_KEYS, LOG_ENTRIES) {
        let clock = RegionClock::new(&Arc::new(region));
        for _ in 0..100 {
            let before = kernel_now_ns();
            let now = clock.now_ns();
            let after = kernel_now_ns();
            if now + DRIFT_BOUND_NS < before || now > after + DRIFT_BOUND_NS {
                eprintln!("absurd: the region clock read {now} between {before} and {after}");
                return ABSURD;
            }
        }
    }
    if let Ok(inspected) = SharedRegion::inspect(path) {
        let summary = inspected.summary(false, &|_| None);
        if summary.keys > capacity {
            eprintln!("absurd: inspect says {} keys", summary.keys);
            return ABSURD;
        }
    }
    0
}

/// Runs `work` on `path` in a forked child; its exit code, or why it did not exit by itself.
fn run_child(path: &Path) -> Result<i32, String> {
    // SAFETY: the child runs the limiter's code alone (the forking thread) and ends with `_exit`.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        // The test harness captures the default hook's output: the panic is written beside the case.
        let said = path.with_extension("panic");
        std::panic::set_hook(Box::new(move |info| {
            let _ = std::fs::write(&said, format!("{info}\n{}", std::backtrace::Backtrace::force_capture()));
        }));
        let code = std::panic::catch_unwind(|| work(path)).unwrap_or(PANICKED);
        // SAFETY: ends the child at once, running nothing of the parent's (no test harness).
        unsafe { libc::_exit(code) };
    }
    let started = Instant::now();
    let mut looked_again = false;
    loop {
        let mut status = 0;
        // SAFETY: our own child.
        if unsafe { libc::waitpid(pid, &raw mut status, libc::WNOHANG) } == pid {
            if libc::WIFEXITED(status) {
                return Ok(libc::WEXITSTATUS(status));
            }
            return Err(format!("killed by signal {}", libc::WTERMSIG(status)));
        }
        let took = started.elapsed();
        if took > FIRST_LOOK && !looked_again {
            looked_again = true;
            eprintln!("fuzz: a case has run for {took:?}; giving it {PATIENCE:?} before calling it a hang");
        }
        if took > PATIENCE {
            // SAFETY: our own child.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, &raw mut status, 0);
            }
            return Err(format!("hung (killed after {took:?})"));
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// Corrupts `area` (offsets in the contents) of the file: the offset and the bytes written.
fn corrupt(file: &std::fs::File, rng: &mut Rng, start: usize, end: usize) -> (usize, Vec<u8>) {
    let len = end - start;
    let (at, bytes) = match rng.below(6) {
        // A few random bytes.
        0 | 1 => {
            let n = 1 + rng.below(8);
            (start + rng.below(len), rng.bytes(n))
        }
        // A number at an edge, aligned.
        2 | 3 => {
            let edges = [0, 1, 2, 0x7f, 0xff, 0x8000_0000, 0xffff_ffff, u64::MAX, u64::MAX / 2, 297, 298, 40, 41, 4096];
            let value = edges[rng.below(edges.len())] ^ if rng.below(4) == 0 { rng.next() & 0xff } else { 0 };
            let width = if rng.below(2) == 0 { 4 } else { 8 };
            let at = start + rng.below(len) / width * width;
            (at, value.to_le_bytes()[..width].to_vec())
        }
        // A line of garbage.
        4 => (start + rng.below(len) / 64 * 64, rng.bytes(64)),
        // A stretch of garbage: occupied-looking slots everywhere, chains anywhere.
        _ => {
            let n = 64 + rng.below(4096);
            (start + rng.below(len), rng.bytes(n))
        }
    };
    let bytes = bytes[..bytes.len().min(end - at)].to_vec();
    file.write_at(&bytes, (HEADER_BYTES + at) as u64).unwrap();
    (at, bytes)
}

fn seeds() -> Vec<u64> {
    if let Some(seed) = std::env::var("RK_FUZZ_SEED").ok().and_then(|s| s.parse().ok()) {
        return vec![seed];
    }
    let random = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(7, |d| d.subsec_nanos());
    vec![1, 2, 3, u64::from(random)]
}

#[test]
fn corrupt_regions_never_hang_crash_or_panic_a_worker() {
    let dir: PathBuf = crate::state_map::region::test_dir("fuzz", "any-bytes");
    let template_path = dir.join("template");
    if let Ok(replay) = std::env::var("RK_FUZZ_REPLAY") {
        // A kept case, as it was.
        let path = dir.join("replay");
        std::fs::copy(replay, &path).unwrap();
        let outcome = run_child(&path);
        let said = std::fs::read_to_string(path.with_extension("panic")).unwrap_or_default();
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(matches!(outcome, Ok(0 | REFUSED)), "{outcome:?}\n{said}");
        return;
    }
    template(&template_path);
    let areas = SharedRegion::inspect(&template_path).unwrap().areas();
    let pristine = std::fs::read(&template_path).unwrap();
    let cases: usize = std::env::var("RK_FUZZ_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(1_200);
    let started = Instant::now();
    let mut failures = Vec::new();
    let mut run = 0;
    // Per area: cases, and of them refused at opening.
    let mut per_area = vec![(0usize, 0usize); areas.len()];
    for seed in seeds() {
        let mut rng = Rng(seed);
        for case in 0..cases {
            let area = rng.below(areas.len());
            let (name, start, end) = areas[area];
            let path = dir.join(format!("case-{}", case % 2));
            let _ = std::fs::remove_file(&path);
            std::fs::copy(&template_path, &path).unwrap();
            let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
            let writes = 1 + rng.below(3);
            let mut what = Vec::new();
            for _ in 0..writes {
                let (at, bytes) = corrupt(&file, &mut rng, start, end);
                what.push(format!("{} bytes at {at:#x}", bytes.len()));
            }
            drop(file);
            // A later write may put back what an earlier one changed.
            let (from, to) = (HEADER_BYTES + start, HEADER_BYTES + end);
            let changed = std::fs::read(&path).unwrap()[from..to] != pristine[from..to];
            run += 1;
            per_area[area].0 += 1;
            let outcome = run_child(&path);
            per_area[area].1 += usize::from(outcome == Ok(REFUSED));
            let bad = match outcome {
                Ok(0) if name == "meta numbers" && changed => {
                    Some("opened although its numbers are corrupt".to_owned())
                }
                Ok(0 | REFUSED) => None,
                Ok(ABSURD) => Some("absurd counts".to_owned()),
                Ok(PANICKED) => Some(format!(
                    "panicked: {}",
                    std::fs::read_to_string(path.with_extension("panic"))
                        .unwrap_or_default()
                        .lines()
                        .next()
                        .unwrap_or("")
                )),
                Ok(code) => Some(format!("exit code {code}")),
                Err(why) => Some(why),
            };
            if let Some(bad) = bad {
                // Kept to replay (the template's hash seeds are random: a seed alone does not replay).
                let kept = std::env::temp_dir().join("rk-fuzz-failures");
                let _ = std::fs::create_dir_all(&kept);
                let kept = kept.join(format!("seed-{seed}-case-{case}"));
                let _ = std::fs::copy(&path, &kept);
                failures.push(format!(
                    "seed {seed} case {case}, {name}: {}: {bad} (file: {})",
                    what.join(", "),
                    kept.display()
                ));
            }
        }
    }
    let took = started.elapsed();
    let counts: Vec<String> = areas
        .iter()
        .zip(&per_area)
        .map(|((name, ..), (n, refused))| format!("{name} {n} ({refused} refused)"))
        .collect();
    eprintln!("fuzz: {run} cases in {took:?}: {}", counts.join(", "));
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(failures.is_empty(), "{} of {run} cases failed:\n{}", failures.len(), failures.join("\n"));
}
