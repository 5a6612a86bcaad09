//! Retrieval by the current message at scale: one user of one agent with
//! 100,000 stored turns (1,000 ended calls of 100 turns), 1,000 session
//! summaries and 1,000 facts, and a live call. Every figure is measured
//! against a baseline run in the same process, in the same run:
//!
//! - `context` with a message (eight questions, cycling), and with a
//!   question never asked before (frames filled anew at each read, so
//!   neither its words nor its results are held from an earlier read), against
//!   the same read with an empty message (no retrieval), interleaved call
//!   by call, all served from the prepared sources the runtime caches;
//!   then, after those, questions never asked before whose words' related
//!   words were worked out before the read (what `Runtime::prepare_message`
//!   does while the user is still speaking), against the same baseline
//!   (apart, so that their words warm nothing for the reads above);
//! - `context` with `use_cache: false` (every source read from the store
//!   and prepared again, what the cache must agree with), with and without
//!   a message, interleaved; and a real miss: a block write for the agent, then
//!   `context`. The miss target (p99 < 5 ms) is judged on the real misses,
//!   this one and the next;
//! - a miss after a new session summary lands: a short call of the user
//!   (`SHORT_TURNS` turns, one stating a preference) ended, the runtime
//!   waited idle (the summary, its fact and any rollup stored), then
//!   `context` with a message, and, after a second such call, without one;
//!   beside each pair, a block write and `context` with a message in the
//!   same state. Each timed read is checked to have missed the cache;
//! - the agent's index build (the first `search` after
//!   `Runtime::drop_search_indexes`), five times, and the memory it adds:
//!   the process's resident memory (VmRSS) around the first build, and the
//!   heap bytes allocated and not freed during each build, counted by a
//!   global allocator that counts only while a build is timed. Before the
//!   first build every stored turn, summary and session is read once, so
//!   the store's page cache is as full before the build as after it and the
//!   figures are the index's own;
//! - `record_turn_durable` (a turn on disk, one every 2 ms, in a call of
//!   another user of the same agent) with nothing else running, against the
//!   same writes while the 100,000-turn index is rebuilt back to back, and
//!   while miss reads (with a message) run back to back; three alternating
//!   rounds of each, only writes started while the load ran counted. The
//!   group-commit window (`store.flush_interval_ms`) is what they may add
//!   at most.
//!
//! The turns are drawn from sentence frames with varied names, places,
//! things and numbers, so postings are not degenerate; each call states one
//! first-person preference, which the offline reflector keeps as a fact.
//!
//! Prints every figure (mean, p50, p99; max for writes) and the ratios, then
//! runs the criterion group. Run with `cargo bench --bench retrieval`.
//! With `RETRIEVAL_EMBED=static` it runs on the static word vectors
//! (every turn gets a vector, retrieval ranks by words and vectors); with
//! `RETRIEVAL_RELATED_WORDS=0`, without related words (the baseline of
//! what they cost).
//! With `RETRIEVAL_PROFILE_SECS=n` it only fills, then runs the miss path
//! with a message in a loop for n seconds (for a profiler to attach to the
//! printed pid) and exits; with `RETRIEVAL_PROFILE_PATH=hit` as well, the
//! cached read with a message instead, with `novel`, the cached read
//! with a question never asked before, and with `summary`, a short call
//! ended and reflected on before each read.
//!
//! A run with the defaults records rows 23–26 of BENCHMARKS.md in
//! `benches/results/` (see `common/results.rs`); a run with either
//! variable above records nothing.

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicIsize, Ordering};
use std::time::{Duration, Instant};

use common::results::{On, Recorder, Row, Run};
use criterion::Criterion;
use recall::engine::model::{BlockLabel, SummaryType};
use recall::engine::search::SearchQuery;
use recall::{ContextOptions, EndOptions, Runtime, RuntimeBuilder, Turn};

const AGENT: &str = "kairix";
const USER: &str = "mark";
const PROBE_USER: &str = "probe";
const CALLS: usize = 1_000;
const TURNS_PER_CALL: usize = 100;
const BUDGET: usize = 32_000;
const TIMED: usize = 3_000;
const MISSES: usize = 100;
const BUILDS: usize = 5;
const WRITES: usize = 500;
const ROUNDS: usize = 3;
const WRITE_PACE: Duration = Duration::from_millis(2);
const SUMMARY_MISSES: usize = 60;
const SHORT_TURNS: usize = 10;

const MESSAGES: [&str; 8] = [
    "When is the dentist appointment with Doctor Okafor?",
    "What did I tell you about the trip to Lisbon in October?",
    "How much was the invoice from Globex?",
    "Which restaurant did Priya recommend for the anniversary dinner?",
    "Did we talk about renewing the passport?",
    "What was the plan for marathon training on Saturdays?",
    "What did my sister say about the wedding budget?",
    "What time is the flight to Toronto?",
];

/// Questions never asked before: these frames filled with other names,
/// places and things at each read (slots as in [`USER_FRAMES`]), so the
/// turns a read retrieves are mostly not those an earlier read did.
const QUESTION_FRAMES: [&str; 8] = [
    "What did {n} say about the {t}?",
    "When was I going to {p} for the {t}?",
    "Did I tell you what {c} said about the {t}?",
    "What did {w} think of the {t}?",
    "When did I go {a} with {n}?",
    "What was the plan for the {t} on {d}?",
    "How much did the {t} cost in {m}?",
    "Who from {c} called about the {t}?",
];

/// Heap bytes allocated minus freed while `COUNTING` is on.
static COUNTED: AtomicIsize = AtomicIsize::new(0);
static COUNTING: AtomicBool = AtomicBool::new(false);

/// The system allocator, counting bytes only while `COUNTING` is on (one
/// relaxed load per allocation otherwise).
struct Counting;

// SAFETY: every call is forwarded unchanged to the system allocator.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = System.alloc(layout);
        if !p.is_null() && COUNTING.load(Ordering::Relaxed) {
            COUNTED.fetch_add(layout.size() as isize, Ordering::Relaxed);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = System.alloc_zeroed(layout);
        if !p.is_null() && COUNTING.load(Ordering::Relaxed) {
            COUNTED.fetch_add(layout.size() as isize, Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout);
        if COUNTING.load(Ordering::Relaxed) {
            COUNTED.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = System.realloc(ptr, layout, new_size);
        if !p.is_null() && COUNTING.load(Ordering::Relaxed) {
            COUNTED.fetch_add(
                new_size as isize - layout.size() as isize,
                Ordering::Relaxed,
            );
        }
        p
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

const NAMES: [&str; 40] = [
    "Priya", "Okafor", "Lena", "Marcus", "Hiro", "Sofia", "Tomasz", "Amara", "Diego", "Ingrid",
    "Ravi", "Chloe", "Kwame", "Yuki", "Mateo", "Freya", "Omar", "Nadia", "Elliot", "Zara", "Bruno",
    "Mei", "Anders", "Lucia", "Farid", "Greta", "Jonah", "Aisha", "Pavel", "Rosa", "Tariq",
    "Helga", "Nico", "Imani", "Sven", "Leila", "Dmitri", "Noor", "Felix", "Carmen",
];
const PLACES: [&str; 30] = [
    "Lisbon",
    "Toronto",
    "Porto",
    "Kyoto",
    "Nairobi",
    "Oslo",
    "Denver",
    "Seville",
    "Krakow",
    "Melbourne",
    "Valencia",
    "Boston",
    "Hamburg",
    "Lima",
    "Dublin",
    "Austin",
    "Zagreb",
    "Hanoi",
    "Bergen",
    "Tucson",
    "Lyon",
    "Cusco",
    "Tallinn",
    "Accra",
    "Perth",
    "Bilbao",
    "Quebec",
    "Split",
    "Sapporo",
    "Marrakesh",
];
const COMPANIES: [&str; 16] = [
    "Globex",
    "Initech",
    "Umbrella",
    "Hooli",
    "Vandelay",
    "Soylent",
    "Acme",
    "Stark",
    "Wonka",
    "Cyberdyne",
    "Tyrell",
    "Pied Piper",
    "Wayne",
    "Oscorp",
    "Massive Dynamic",
    "Gringotts",
];
const THINGS: [&str; 60] = [
    "passport",
    "laptop",
    "invoice",
    "dentist appointment",
    "car insurance",
    "lease",
    "tax return",
    "gym membership",
    "wedding budget",
    "anniversary dinner",
    "flight",
    "hotel booking",
    "job offer",
    "performance review",
    "salary negotiation",
    "mortgage",
    "vet visit",
    "birthday party",
    "marathon training",
    "piano lessons",
    "kitchen renovation",
    "garden shed",
    "phone contract",
    "electricity bill",
    "parking permit",
    "library books",
    "visa application",
    "conference talk",
    "quarterly report",
    "team offsite",
    "moving boxes",
    "bike repair",
    "dog walker",
    "babysitter",
    "blood test",
    "eye exam",
    "concert tickets",
    "camping trip",
    "ski rental",
    "wine tasting",
    "cooking class",
    "book club",
    "thesis draft",
    "grant proposal",
    "code review",
    "server migration",
    "product launch",
    "budget spreadsheet",
    "retirement plan",
    "school enrollment",
    "dance recital",
    "charity run",
    "photo album",
    "family reunion",
    "roof leak",
    "water heater",
    "winter tires",
    "credit card",
    "savings account",
    "health insurance",
];
const PEOPLE: [&str; 12] = [
    "my sister",
    "my brother",
    "my mother",
    "my father",
    "my manager",
    "my landlord",
    "my neighbor",
    "my partner",
    "my cousin",
    "my coach",
    "my accountant",
    "my daughter",
];
const DAYS: [&str; 7] = [
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
    "Sunday",
];
const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const ACTIVITIES: [&str; 20] = [
    "climbing",
    "chess",
    "sailing",
    "pottery",
    "running",
    "baking",
    "cycling",
    "painting",
    "jazz",
    "gardening",
    "swimming",
    "yoga",
    "fishing",
    "knitting",
    "surfing",
    "hiking",
    "tennis",
    "woodworking",
    "birdwatching",
    "salsa",
];

/// What the user says. Slots: {n} a name, {p} a place, {c} a company,
/// {t} a thing, {w} a person, {d} a day, {m} a month, {a} an activity,
/// {x} a number. None of them states a fact the offline rules keep.
const USER_FRAMES: [&str; 40] = [
    "Can we talk about the {t} again?",
    "{w} keeps asking about the {t}.",
    "I need to sort out the {t} before {d}.",
    "The {t} is due on {m} {x}.",
    "{n} said the {t} would cost about {x} dollars.",
    "We are flying to {p} in {m} for the {t}.",
    "I had a call with {n} from {c} about the {t}.",
    "Is {d} at {x} still fine for the {t}?",
    "{w} wants to visit {p} after the {t}.",
    "The meeting with {c} moved to {d} afternoon.",
    "I went {a} with {n} last {d}.",
    "My {t} got delayed by {x} days.",
    "Do you think {c} will call back about the {t}?",
    "I spent {x} minutes on the phone about the {t}.",
    "{n} recommended a place in {p} for the {t}.",
    "I keep forgetting the {t}, it is stressing me out.",
    "The {t} with {n} went better than expected.",
    "Should I tell {w} about the {t} now or in {m}?",
    "I found a cheaper option for the {t} in {p}.",
    "We booked the {t} for {m} {x}.",
    "What if the {t} clashes with {a} on {d}?",
    "I am nervous about the {t} at {c}.",
    "{w} and {n} are coming to {p} in {m}.",
    "The {t} needs {x} signatures by {d}.",
    "I started {a} again, about {x} hours a week.",
    "Last time in {p} the {t} was a mess.",
    "Could you draft a note to {n} about the {t}?",
    "The {t} from {c} arrived damaged.",
    "I think {w} forgot the {t} on {d}.",
    "How long does a {t} usually take?",
    "We saved {x} dollars on the {t} this {m}.",
    "{n} is moving to {p} for a job at {c}.",
    "The {t} and the {t} are both on {d}.",
    "I would like to finish the {t} before {m}.",
    "My {t} reminder did not go off on {d}.",
    "{n} from {c} sent over the {t} details.",
    "I skipped {a} because of the {t}.",
    "Is it normal that the {t} takes {x} weeks?",
    "Let's plan the {t} around {d} mornings.",
    "I am back from {p} and the {t} is waiting.",
];

/// What the agent answers, with the same slots.
const AGENT_FRAMES: [&str; 24] = [
    "Got it. I noted the {t} for {d}.",
    "Let's put the {t} on your list for {m} {x}.",
    "That sounds like a good plan. Do you want a reminder about the {t}?",
    "I can help you draft something for {n}.",
    "Last time you mentioned {p}; is that still the plan?",
    "Sure. The {t} comes first, then {a} on {d}.",
    "Understood. I will keep the {t} and {n} in mind.",
    "{c} usually answers within {x} days.",
    "We can split the {t} into smaller steps this week.",
    "It might help to call {n} before {d}.",
    "A {t} like that often takes {x} weeks.",
    "Noted: {w} is involved in the {t}.",
    "Good news about the {t}. How do you feel about it?",
    "I would check the {t} paperwork before you go to {p}.",
    "Do you want to compare the options for the {t}?",
    "That is a lot at once. Let's start with the {t}.",
    "I will remember that {n} is in {p}.",
    "Maybe {a} on {d} will help you unwind after the {t}.",
    "The {t} and the trip to {p} fit in {m}.",
    "Let me summarize: the {t}, {n}, and {d} at {x}.",
    "You handled the {t} well last time.",
    "Shall I add {c} to your contacts for the {t}?",
    "Okay. We can revisit the {t} on {d}.",
    "Thanks for the update on the {t}.",
];

/// xorshift64*: a fixed, fast sequence.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Skewed towards low indices, like word frequencies.
    fn pick<'a>(&mut self, list: &[&'a str]) -> &'a str {
        let a = (self.next() % list.len() as u64) as usize;
        let b = (self.next() % list.len() as u64) as usize;
        list[a.min(b)]
    }

    fn pick_uniform<'a>(&mut self, list: &[&'a str]) -> &'a str {
        list[(self.next() % list.len() as u64) as usize]
    }

    fn fill(&mut self, frame: &str) -> String {
        let mut out = String::with_capacity(frame.len() + 32);
        let mut rest = frame;
        while let Some(at) = rest.find('{') {
            out.push_str(&rest[..at]);
            let slot = rest.as_bytes()[at + 1];
            let word = match slot {
                b'n' => self.pick(&NAMES).to_string(),
                b'p' => self.pick(&PLACES).to_string(),
                b'c' => self.pick(&COMPANIES).to_string(),
                b't' => self.pick(&THINGS).to_string(),
                b'w' => self.pick(&PEOPLE).to_string(),
                b'd' => self.pick(&DAYS).to_string(),
                b'm' => self.pick(&MONTHS).to_string(),
                b'a' => self.pick(&ACTIVITIES).to_string(),
                _ => (1 + self.next() % 500).to_string(),
            };
            // "{w} keeps..." at the start of a sentence.
            if at == 0 && out.is_empty() {
                let mut c = word.chars();
                if let Some(first) = c.next() {
                    out.extend(first.to_uppercase());
                    out.push_str(c.as_str());
                }
            } else {
                out.push_str(&word);
            }
            rest = &rest[at + 3..];
        }
        out.push_str(rest);
        out
    }

    /// A turn: one or two sentences of the user, one of the agent.
    fn turn(&mut self) -> (String, String) {
        let frame = self.pick_uniform(&USER_FRAMES);
        let mut user = self.fill(frame);
        if self.next().is_multiple_of(2) {
            let frame = self.pick_uniform(&USER_FRAMES);
            user.push(' ');
            user.push_str(&self.fill(frame));
        }
        let frame = self.pick_uniform(&AGENT_FRAMES);
        (user, self.fill(frame))
    }
}

/// Fills the runtime through its API: 1,000 ended calls of 100 turns, each
/// reflected on (a session summary, one fact), then a live call.
async fn fill(rt: &Runtime) {
    rt.set_block(
        AGENT,
        BlockLabel::Persona,
        &"Kairix is a patient personal assistant. ".repeat(20),
    )
    .await
    .expect("persona");
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let started = Instant::now();
    for call in 0..CALLS {
        let conn = format!("call-{call}");
        rt.start_session(AGENT, USER, &conn).await.expect("start");
        let fact_at = (rng.next() % TURNS_PER_CALL as u64) as usize;
        for t in 0..TURNS_PER_CALL {
            let (user, agent) = if t == fact_at {
                (
                    format!(
                        "I prefer {} with {} on weekday number {call}.",
                        rng.pick(&ACTIVITIES),
                        rng.pick(&NAMES)
                    ),
                    "Noted, I will plan around it.".to_string(),
                )
            } else {
                rng.turn()
            };
            rt.record_turn(&conn, Turn::new(user, agent)).expect("turn");
        }
        rt.end_session(&conn, EndOptions::default()).expect("end");
        if call % 50 == 49 {
            rt.wait_idle().await.expect("idle");
        }
        if call % 250 == 249 {
            println!(
                "  filled {} calls in {:.1} s",
                call + 1,
                started.elapsed().as_secs_f64()
            );
        }
    }
    rt.wait_idle().await.expect("idle");
    rt.start_session(AGENT, USER, "live").await.expect("start");
    for _ in 0..3 {
        let (user, agent) = rng.turn();
        rt.record_turn("live", Turn::new(user, agent))
            .expect("turn");
    }
    rt.flush().await.expect("flush");
}

/// A short call of the user, ended, and the runtime waited idle: its
/// session summary, fact and any rollup are stored.
async fn short_call(rt: &Runtime, rng: &mut Rng, conn: &str) {
    rt.start_session(AGENT, USER, conn).await.expect("start");
    for t in 0..SHORT_TURNS {
        let (user, agent) = if t == SHORT_TURNS / 2 {
            (
                format!(
                    "I prefer {} with {} on short call {conn}.",
                    rng.pick(&ACTIVITIES),
                    rng.pick(&NAMES)
                ),
                "Noted, I will plan around it.".to_string(),
            )
        } else {
            rng.turn()
        };
        rt.record_turn(conn, Turn::new(user, agent)).expect("turn");
    }
    rt.end_session(conn, EndOptions::default()).expect("end");
    rt.wait_idle().await.expect("idle");
}

/// Times one `context` read, checking that it missed the cache.
async fn missed_read(rt: &Runtime, message: &str) -> u64 {
    let misses = rt.source_cache_stats().misses;
    let t = Instant::now();
    black_box(
        rt.context(AGENT, USER, message, BUDGET, ContextOptions::default())
            .await
            .expect("context"),
    );
    let took = t.elapsed().as_nanos() as u64;
    assert_eq!(
        rt.source_cache_stats().misses,
        misses + 1,
        "the read missed the cache"
    );
    took
}

struct Figures {
    mean: f64,
    p50: u64,
    p99: u64,
    max: u64,
}

fn figures(mut ns: Vec<u64>) -> Figures {
    ns.sort_unstable();
    let at = |q: f64| ns[((ns.len() as f64 * q) as usize).min(ns.len() - 1)];
    Figures {
        mean: ns.iter().sum::<u64>() as f64 / ns.len() as f64,
        p50: at(0.5),
        p99: at(0.99),
        max: ns[ns.len() - 1],
    }
}

fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

fn line(what: &str, f: &Figures) {
    println!(
        "{what}: mean {:.3} ms, p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms",
        f.mean / 1e6,
        ms(f.p50),
        ms(f.p99),
        ms(f.max)
    );
}

fn query(text: &str) -> SearchQuery {
    SearchQuery {
        text: text.to_string(),
        user_id: Some(USER.to_string()),
        limit: 10,
        ..Default::default()
    }
}

/// Drops every index and times the first search, which builds the agent's
/// index again; returns the time and the heap bytes it kept.
async fn build(rt: &Runtime) -> (Duration, isize) {
    rt.drop_search_indexes();
    COUNTED.store(0, Ordering::Relaxed);
    COUNTING.store(true, Ordering::Relaxed);
    let t = Instant::now();
    let hits = rt.search(AGENT, query(MESSAGES[0])).await.expect("search");
    let took = t.elapsed();
    COUNTING.store(false, Ordering::Relaxed);
    black_box(hits);
    (took, COUNTED.load(Ordering::Relaxed))
}

/// `WRITES` durable turns of a fresh call of the probe user, one every
/// `WRITE_PACE`: (start offset from `origin`, latency) in ns.
async fn durable_writes(rt: Runtime, conn: String, origin: Instant) -> Vec<(u64, u64)> {
    rt.start_session(AGENT, PROBE_USER, &conn)
        .await
        .expect("start");
    let mut out = Vec::with_capacity(WRITES);
    for i in 0..WRITES {
        let t = Instant::now();
        rt.record_turn_durable(
            &conn,
            Turn::new(
                format!("Probe question {i} about the parking permit"),
                "Probe answer: it is renewed.",
            ),
        )
        .await
        .expect("durable turn");
        out.push((
            t.duration_since(origin).as_nanos() as u64,
            t.elapsed().as_nanos() as u64,
        ));
        tokio::time::sleep(WRITE_PACE).await;
    }
    out
}

/// Durable writes while `load` runs back to back; returns the writes'
/// latencies (only those started while a load ran) and the load's times.
async fn writes_under<F, Fut>(rt: &Runtime, conn: &str, mut load: F) -> (Vec<u64>, Vec<u64>)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let origin = Instant::now();
    let writer = tokio::spawn(durable_writes(rt.clone(), conn.to_string(), origin));
    let mut spans: Vec<(u64, u64)> = Vec::new();
    while !writer.is_finished() {
        let start = origin.elapsed().as_nanos() as u64;
        load().await;
        spans.push((start, origin.elapsed().as_nanos() as u64));
    }
    let writes = writer.await.expect("writer");
    let during: Vec<u64> = writes
        .iter()
        .filter(|(at, _)| spans.iter().any(|(s, e)| s <= at && at < e))
        .map(|(_, lat)| *lat)
        .collect();
    (during, spans.iter().map(|(s, e)| e - s).collect())
}

const COMMAND: &str = "cargo bench --bench retrieval";

fn main() {
    let results = if ["RETRIEVAL_EMBED", "RETRIEVAL_RELATED_WORDS"]
        .iter()
        .any(|v| std::env::var_os(v).is_some())
    {
        Recorder::off(
            "a run with RETRIEVAL_EMBED or RETRIEVAL_RELATED_WORDS: not the rows' defaults",
        )
    } else {
        Recorder::bench()
    };
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let dir = tempfile::tempdir().expect("temp dir");
    let mut settings = recall::Settings::default();
    if std::env::var("RETRIEVAL_EMBED").as_deref() == Ok("static") {
        settings.embed.kind = recall::engine::settings::EmbedKind::Static;
    }
    if let Ok(n) = std::env::var("RETRIEVAL_RELATED_WORDS") {
        settings.context.retrieval_related_words = n.parse().expect("a count");
    }
    let builder = RuntimeBuilder::new(dir.path()).settings(settings);
    let rt = tokio.block_on(builder.start()).expect("runtime start");
    let flush_window = rt.settings().store.flush_interval_ms;
    let turns = fill_and_count(&tokio, &rt);
    if profile(&tokio, &rt) {
        return;
    }
    let builds = index_builds(&tokio, &rt, turns);
    related_words(&rt);
    context_tiers(&tokio, &rt);
    let cached = cached_reads(&tokio, &rt);
    let (real_with, real_without) = miss_reads(&tokio, &rt);
    let writes = writes_under_load(&tokio, &rt, flush_window);
    let (summary_with, summary_without) = reads_after_a_new_summary(&tokio, &rt);
    println!("load average at the end: {}", common::load_average());

    criterion_group(&tokio, &rt);

    let load = format!("load average {}", common::load_average());
    record_reads(
        &results,
        &load,
        &cached,
        [&real_with, &real_without],
        [&summary_with, &summary_without],
    );
    record_builds_and_writes(&results, &load, &builds, &writes, flush_window);
    let _ = tokio.block_on(rt.shutdown());
    #[cfg(feature = "tiktoken")]
    exact_tokens(&results, &tokio, dir.path(), &cached);
}

/// Row 37: the reads of row 23 counting o200k_base tokens
/// (`context.tokenizer`), on the same data, against row 23's own figures
/// (characters / 4) from this run.
#[cfg(feature = "tiktoken")]
fn exact_tokens(
    results: &Recorder,
    tokio: &tokio::runtime::Runtime,
    dir: &std::path::Path,
    chars4: &Cached,
) {
    let mut settings = recall::Settings::default();
    settings.context.tokenizer = recall::engine::settings::TokenizerKind::O200kBase;
    let rt = tokio
        .block_on(RuntimeBuilder::new(dir).settings(settings).start())
        .expect("runtime start");
    // The first read prepares the sources (every summary and fact counted).
    let t = Instant::now();
    tokio
        .block_on(rt.context(AGENT, USER, MESSAGES[0], BUDGET, ContextOptions::default()))
        .expect("context");
    println!(
        "o200k_base: first read, sources prepared, {:.1} ms",
        t.elapsed().as_secs_f64() * 1e3
    );
    let o200k = cached_reads(tokio, &rt);
    let ratio = |a: u64, b: u64| a as f64 / b.max(1) as f64;
    let load = format!("load average {}", common::load_average());
    results.record(
        &Row::new(
            37,
            "Row 23's reads counting OpenAI o200k_base tokens (`context.tokenizer`, \
             tiktoken-rs), p99 (p50): one of eight messages cycling, a question never \
             asked before; and the read without a message",
            "cargo bench --bench retrieval --features tiktoken",
        )
        .baseline("row 23's reads counting characters / 4, earlier in the same run")
        .target("p99 < 1 ms with a message, as row 23")
        .check(On::Figure, "p99", "<", 1.0, "ms")
        .check(On::Figure, "never asked p99", "<", 1.0, "ms"),
        Run::new()
            .figure("p99", ms(o200k.with.p99), "ms")
            .figure("p50", ms(o200k.with.p50), "ms")
            .figure("never asked p99", ms(o200k.novel.p99), "ms")
            .figure("without a message p99", ms(o200k.without.p99), "ms")
            .base("p99", ms(chars4.with.p99), "ms")
            .base("p50", ms(chars4.with.p50), "ms")
            .base("never asked p99", ms(chars4.novel.p99), "ms")
            .base("without a message p99", ms(chars4.without.p99), "ms")
            .ratio("p99", ratio(o200k.with.p99, chars4.with.p99))
            .ratio("p50", ratio(o200k.with.p50, chars4.with.p50))
            .ratio("never asked p99", ratio(o200k.novel.p99, chars4.novel.p99))
            .note(&load),
    );
    let _ = tokio.block_on(rt.shutdown());
}

/// Fills the store, prints what it holds and checks nothing built the
/// index meanwhile; returns the number of turns written.
fn fill_and_count(tokio: &tokio::runtime::Runtime, rt: &Runtime) -> u64 {
    let started = Instant::now();
    tokio.block_on(fill(rt));
    let (facts, sessions, summaries, turns) = tokio.block_on(async {
        let facts = rt.facts(AGENT, USER).await.expect("facts").len();
        let mut summaries = 0;
        let mut sessions = 0;
        for kind in SummaryType::ALL {
            let n = rt.summaries(AGENT, kind).await.expect("summaries").len();
            summaries += n;
            if kind == SummaryType::Session {
                sessions = n;
            }
        }
        let turns = rt.stats().await.expect("stats").store.turns_written;
        (facts, sessions, summaries, turns)
    });
    println!(
        "filled in {:.1} s: {turns} turns in {CALLS} ended calls and a live one, {sessions} session \
         summaries ({summaries} of every layer), {facts} facts; {} cores, load average {}",
        started.elapsed().as_secs_f64(),
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        common::load_average()
    );
    assert_eq!(
        rt.search_indexes_built(),
        0,
        "nothing built the index during the fill"
    );
    turns
}

/// With `RETRIEVAL_PROFILE_SECS` set, reads in a loop for a profiler, shuts
/// the runtime down and returns true.
fn profile(tokio: &tokio::runtime::Runtime, rt: &Runtime) -> bool {
    if let Some(secs) = std::env::var("RETRIEVAL_PROFILE_SECS")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
    {
        tokio.block_on(async {
            rt.indexed_items(AGENT).await.expect("index");
            let path = std::env::var("RETRIEVAL_PROFILE_PATH").unwrap_or_default();
            println!(
                "profile: pid {}, {} with a message for {secs} s",
                std::process::id(),
                match path.as_str() {
                    "hit" => "cached reads",
                    "novel" => "cached reads, questions never asked before",
                    "summary" => "reads after a new session summary",
                    _ => "the miss path",
                }
            );
            let until = Instant::now() + Duration::from_secs(secs);
            let mut n = 0;
            let mut rng = Rng(0x2545_f491_4f6c_dd1d);
            while Instant::now() < until {
                let m = MESSAGES[n % MESSAGES.len()];
                let ctx = match path.as_str() {
                    "hit" => {
                        rt.context(AGENT, USER, m, BUDGET, ContextOptions::default())
                            .await
                    }
                    "novel" => {
                        let q = rng.fill(QUESTION_FRAMES[n % QUESTION_FRAMES.len()]);
                        rt.context(AGENT, USER, &q, BUDGET, ContextOptions::default())
                            .await
                    }
                    "summary" => {
                        short_call(rt, &mut rng, &format!("profile-{n}")).await;
                        rt.context(AGENT, USER, m, BUDGET, ContextOptions::default())
                            .await
                    }
                    _ => rt.context(AGENT, USER, m, BUDGET, no_cache()).await,
                };
                black_box(ctx.expect("context"));
                n += 1;
            }
            println!("profile: {n} reads");
            let _ = rt.clone().shutdown().await;
        });
        return true;
    }
    false
}

/// The index builds' times and heap kept, and the resident memory around
/// the first.
struct Builds {
    times: Vec<u64>,
    heaps: Vec<isize>,
    items: usize,
    rss_before: u64,
    rss_after: u64,
}

/// Reads every stored record once, then times `BUILDS` index builds.
fn index_builds(tokio: &tokio::runtime::Runtime, rt: &Runtime, turns: u64) -> Builds {
    // Every stored turn, summary and session read once, so the store's
    // page cache holds what the build reads before it is timed.
    tokio.block_on(async {
        for s in rt.sessions(Some(AGENT)).await.expect("sessions") {
            black_box(rt.turns(s.session_id).await.expect("turns"));
        }
        black_box(
            rt.context(AGENT, USER, "", BUDGET, no_cache())
                .await
                .expect("context"),
        );
    });
    let rss_before = common::rss_kib();
    let (first, first_heap) = tokio.block_on(build(rt));
    let rss_after = common::rss_kib();
    let items = tokio
        .block_on(rt.indexed_items(AGENT))
        .expect("items")
        .len();
    let mut times = vec![first.as_nanos() as u64];
    let mut heaps = vec![first_heap];
    for _ in 1..BUILDS {
        let (t, h) = tokio.block_on(build(rt));
        times.push(t.as_nanos() as u64);
        heaps.push(h);
    }
    println!(
        "index build ({items} items: {turns} turns, the rest summaries of every layer and facts), \
         {BUILDS} builds: {}",
        times
            .iter()
            .map(|t| format!("{:.2} s", *t as f64 / 1e9))
            .collect::<Vec<_>>()
            .join(", ")
    );
    println!(
        "  heap kept per build: {} MiB; per indexed item {} bytes (all items counted as turns)",
        heaps
            .iter()
            .map(|h| format!("{:.1}", *h as f64 / 1_048_576.0))
            .collect::<Vec<_>>()
            .join(", "),
        heaps
            .iter()
            .map(|h| format!("{}", *h / items.max(1) as isize))
            .collect::<Vec<_>>()
            .join(", ")
    );
    println!(
        "  resident memory around the first build: +{:.1} MiB, {} bytes per indexed item",
        rss_after.saturating_sub(rss_before) as f64 / 1024.0,
        rss_after.saturating_sub(rss_before) * 1024 / items.max(1) as u64
    );
    Builds {
        times,
        heaps,
        items,
        rss_before,
        rss_after,
    }
}

/// The words related to a message word: what working them out costs the
/// first time, against what it costs once kept.
fn related_words(rt: &Runtime) {
    // A message word's related words are worked out the first time the
    // word is asked (a pass over the static table) and kept: timed here
    // for words no read has asked yet, against the same words again.
    let words = [
        "insect",
        "city",
        "dog",
        "coffee",
        "language",
        "instrument",
        "sport",
        "car",
        "job",
        "daughter",
        "medicine",
        "herb",
        "phone",
        "injury",
        "band",
        "subject",
        "food",
        "brand",
        "suburb",
        "holiday",
        "garden",
        "bird",
        "river",
        "teacher",
        "doctor",
        "book",
        "movie",
        "song",
        "school",
        "house",
        "money",
        "weather",
    ];
    let threshold = rt.settings().context.retrieval_related_similarity;
    let related = |w: &str| recall::engine::static_embed::related_stems(w, threshold).len();
    let mut first = Vec::with_capacity(words.len());
    let mut again = Vec::with_capacity(words.len());
    for w in words {
        let t = Instant::now();
        black_box(related(w));
        first.push(t.elapsed().as_nanos() as u64);
    }
    for w in words {
        let t = Instant::now();
        black_box(related(w));
        again.push(t.elapsed().as_nanos() as u64);
    }
    let (first, again) = (figures(first), figures(again));
    line("related words, a word's first time", &first);
    line("related words, kept", &again);
    println!(
        "  ratio first/kept: mean {:.0}x",
        first.mean / again.mean.max(1.0)
    );
}

/// The tiers of a context with a message and without.
fn context_tiers(tokio: &tokio::runtime::Runtime, rt: &Runtime) {
    for (label, m) in [("with a message", MESSAGES[0]), ("without a message", "")] {
        let ctx = tokio
            .block_on(rt.context(AGENT, USER, m, BUDGET, ContextOptions::default()))
            .expect("context");
        println!(
            "context {label}, budget {BUDGET}: {} tokens used, {} items trimmed",
            ctx.total_tokens,
            ctx.trimmed.len()
        );
        for t in &ctx.tiers {
            println!(
                "  {:?}: {} items, {} tokens",
                t.tier,
                t.items.len(),
                t.tokens
            );
        }
    }
}

/// The cached reads' figures: with a message (cycling), never asked before,
/// without one, never asked before with its words prepared, and the read
/// without a message beside those.
struct Cached {
    with: Figures,
    novel: Figures,
    without: Figures,
    prepared: Figures,
    prepared_without: Figures,
}

fn cached_reads(tokio: &tokio::runtime::Runtime, rt: &Runtime) -> Cached {
    let threshold = rt.settings().context.retrieval_related_similarity;
    let related = |w: &str| recall::engine::static_embed::related_stems(w, threshold).len();
    // Cached reads, with a message (one of eight, cycling), with one never
    // asked before, and without one, interleaved.
    let (with, novel, without) = tokio.block_on(async {
        let mut with = Vec::with_capacity(TIMED);
        let mut novel = Vec::with_capacity(TIMED);
        let mut without = Vec::with_capacity(TIMED);
        let mut rng = Rng(0x6a09_e667_f3bc_c908);
        for i in 0..TIMED + 300 {
            let t = Instant::now();
            black_box(
                rt.context(
                    AGENT,
                    USER,
                    MESSAGES[i % MESSAGES.len()],
                    BUDGET,
                    ContextOptions::default(),
                )
                .await
                .expect("context"),
            );
            let a = t.elapsed().as_nanos() as u64;
            let question = rng.fill(QUESTION_FRAMES[i % QUESTION_FRAMES.len()]);
            let t = Instant::now();
            black_box(
                rt.context(AGENT, USER, &question, BUDGET, ContextOptions::default())
                    .await
                    .expect("context"),
            );
            let n = t.elapsed().as_nanos() as u64;
            let t = Instant::now();
            black_box(
                rt.context(AGENT, USER, "", BUDGET, ContextOptions::default())
                    .await
                    .expect("context"),
            );
            let b = t.elapsed().as_nanos() as u64;
            if i >= 300 {
                with.push(a);
                novel.push(n);
                without.push(b);
            }
        }
        (with, novel, without)
    });
    // Questions never asked before, their words prepared, and the read
    // without a message, interleaved.
    let (prepared, prepared_without) = tokio.block_on(async {
        let mut prepared = Vec::with_capacity(TIMED);
        let mut without = Vec::with_capacity(TIMED);
        let mut rng = Rng(0xbb67_ae85_84ca_a73b);
        for i in 0..TIMED {
            let question = rng.fill(QUESTION_FRAMES[i % QUESTION_FRAMES.len()]);
            for w in recall::engine::lang::tokens(&question) {
                black_box(related(&w));
            }
            let t = Instant::now();
            black_box(
                rt.context(AGENT, USER, &question, BUDGET, ContextOptions::default())
                    .await
                    .expect("context"),
            );
            prepared.push(t.elapsed().as_nanos() as u64);
            let t = Instant::now();
            black_box(
                rt.context(AGENT, USER, "", BUDGET, ContextOptions::default())
                    .await
                    .expect("context"),
            );
            without.push(t.elapsed().as_nanos() as u64);
        }
        (prepared, without)
    });
    let stats = rt.source_cache_stats();
    let (with, novel, without) = (figures(with), figures(novel), figures(without));
    let (prepared, prepared_without) = (figures(prepared), figures(prepared_without));
    line("context with a message (cached sources)", &with);
    line(
        "context with a message never asked before (cached sources)",
        &novel,
    );
    line("context without a message (cached sources)", &without);
    let verdict = |f: &Figures| if f.p99 < 1_000_000 { "met" } else { "MISSED" };
    println!(
        "  ratio with/without: p99 {:.1}x, p50 {:.1}x; never asked before/without: p99 {:.1}x, \
         p50 {:.1}x; target p99 < 1 ms: {} (cycling), {} (never asked before) ({} hits, {} \
         misses)",
        with.p99 as f64 / without.p99.max(1) as f64,
        with.p50 as f64 / without.p50.max(1) as f64,
        novel.p99 as f64 / without.p99.max(1) as f64,
        novel.p50 as f64 / without.p50.max(1) as f64,
        verdict(&with),
        verdict(&novel),
        stats.hits,
        stats.misses,
    );
    line(
        "context with a message never asked before, its words prepared (after the reads above)",
        &prepared,
    );
    line("context without a message, beside those", &prepared_without);
    println!(
        "  ratio its words prepared/without: p99 {:.1}x, p50 {:.1}x; target p99 < 1 ms: {}",
        prepared.p99 as f64 / prepared_without.p99.max(1) as f64,
        prepared.p50 as f64 / prepared_without.p50.max(1) as f64,
        verdict(&prepared),
    );
    Cached {
        with,
        novel,
        without,
        prepared,
        prepared_without,
    }
}

/// The miss path and real misses (after a block write); returns the real
/// misses with a message and without.
fn miss_reads(tokio: &tokio::runtime::Runtime, rt: &Runtime) -> (Figures, Figures) {
    // The miss path, with and without a message, interleaved.
    let [miss_with, miss_without, real_with, real_without] = tokio.block_on(async {
        let mut out: [Vec<u64>; 4] = Default::default();
        for i in 0..MISSES + 5 {
            let m = MESSAGES[i % MESSAGES.len()];
            let t = Instant::now();
            black_box(
                rt.context(AGENT, USER, m, BUDGET, no_cache())
                    .await
                    .expect("context"),
            );
            let a = t.elapsed().as_nanos() as u64;
            let t = Instant::now();
            black_box(
                rt.context(AGENT, USER, "", BUDGET, no_cache())
                    .await
                    .expect("context"),
            );
            let b = t.elapsed().as_nanos() as u64;
            // A real miss: a write for the agent, then a read.
            rt.set_block(AGENT, BlockLabel::Human, &format!("Mark, version {i}."))
                .await
                .expect("block");
            let t = Instant::now();
            black_box(
                rt.context(AGENT, USER, m, BUDGET, ContextOptions::default())
                    .await
                    .expect("context"),
            );
            let c = t.elapsed().as_nanos() as u64;
            rt.set_block(AGENT, BlockLabel::Human, &format!("Mark, version {i}b."))
                .await
                .expect("block");
            let t = Instant::now();
            black_box(
                rt.context(AGENT, USER, "", BUDGET, ContextOptions::default())
                    .await
                    .expect("context"),
            );
            let d = t.elapsed().as_nanos() as u64;
            if i >= 5 {
                for (v, x) in out.iter_mut().zip([a, b, c, d]) {
                    v.push(x);
                }
            }
        }
        out
    });
    let [miss_with, miss_without, real_with, real_without] =
        [miss_with, miss_without, real_with, real_without].map(figures);
    line(
        "context_uncached with a message (the miss path)",
        &miss_with,
    );
    line("context_uncached without a message", &miss_without);
    line("context after a block write, with a message", &real_with);
    line(
        "context after a block write, without a message",
        &real_without,
    );
    println!(
        "  ratio uncached with/without a message: p99 {:.2}x, p50 {:.2}x; target miss p99 < 5 ms \
         (a read after a write, with a message): {}",
        miss_with.p99 as f64 / miss_without.p99.max(1) as f64,
        miss_with.p50 as f64 / miss_without.p50.max(1) as f64,
        if real_with.p99 < 5_000_000 {
            "met"
        } else {
            "MISSED"
        }
    );
    (real_with, real_without)
}

/// Durable writes' figures: alone, during index builds, during miss reads.
struct Writes {
    alone: Figures,
    during_builds: Figures,
    during_misses: Figures,
}

fn writes_under_load(tokio: &tokio::runtime::Runtime, rt: &Runtime, flush_window: u64) -> Writes {
    // Durable turn writes: alone, during index builds, during miss reads,
    // in alternating rounds (a fresh call each), so that what else runs on
    // the machine weighs on all three alike.
    let mut alone = Vec::new();
    let (mut during_builds, mut build_times) = (Vec::new(), Vec::new());
    let (mut during_misses, mut miss_times) = (Vec::new(), Vec::new());
    for round in 0..ROUNDS {
        let writes = tokio.block_on(durable_writes(
            rt.clone(),
            format!("probe-alone-{round}"),
            Instant::now(),
        ));
        alone.extend(writes.into_iter().map(|(_, l)| l));
        let (w, b) = tokio.block_on(writes_under(rt, &format!("probe-builds-{round}"), || {
            let rt = rt.clone();
            async move {
                build(&rt).await;
            }
        }));
        during_builds.extend(w);
        build_times.extend(b);
        let (w, m) = tokio.block_on(writes_under(rt, &format!("probe-misses-{round}"), || {
            let rt = rt.clone();
            async move {
                black_box(
                    rt.context(AGENT, USER, MESSAGES[1], BUDGET, no_cache())
                        .await
                        .expect("context"),
                );
            }
        }));
        during_misses.extend(w);
        miss_times.extend(m);
    }
    let alone = figures(alone);
    let (n_builds, n_misses) = (build_times.len(), miss_times.len());
    let (nb, nm) = (during_builds.len(), during_misses.len());
    let (during_builds, during_misses) = (figures(during_builds), figures(during_misses));
    line("record_turn_durable, nothing else running", &alone);
    line(
        &format!("record_turn_durable during index builds ({nb} writes, {n_builds} builds)"),
        &during_builds,
    );
    line(
        &format!("record_turn_durable during miss reads ({nm} writes, {n_misses} reads)"),
        &during_misses,
    );
    line(
        "  the index builds meanwhile",
        &figures(build_times.clone()),
    );
    line("  the miss reads meanwhile", &figures(miss_times.clone()));
    let window = flush_window * 1_000_000;
    let verdict = |added: u64| if added <= window { "within" } else { "OVER" };
    for (label, f) in [("builds", &during_builds), ("miss reads", &during_misses)] {
        let (p99_added, max_added) = (
            f.p99.saturating_sub(alone.p99),
            f.max.saturating_sub(alone.max),
        );
        println!(
            "  during {label}: p99 {:.2}x, p50 {:.2}x of alone; added at p99 {:.2} ms ({}), at the max \
             {:.2} ms ({}) the group-commit window of {flush_window} ms",
            f.p99 as f64 / alone.p99.max(1) as f64,
            f.p50 as f64 / alone.p50.max(1) as f64,
            ms(p99_added),
            verdict(p99_added),
            ms(max_added),
            verdict(max_added),
        );
    }
    Writes {
        alone,
        during_builds,
        during_misses,
    }
}

/// Misses after a new session summary lands; returns those with a message
/// and without.
fn reads_after_a_new_summary(tokio: &tokio::runtime::Runtime, rt: &Runtime) -> (Figures, Figures) {
    // A miss after a new session summary lands: what the next call's first
    // read costs once the previous call is reflected on. The block-write
    // miss beside it, in the same state, changes nothing the read decodes
    // or retrieves.
    let [after_summary_with, after_summary_without, after_block] = tokio.block_on(async {
        let mut rng = Rng(0x2545_f491_4f6c_dd1d);
        let before = rt
            .summaries(AGENT, SummaryType::Session)
            .await
            .expect("summaries")
            .len();
        let mut out: [Vec<u64>; 3] = Default::default();
        let mut calls = 0;
        for i in 0..SUMMARY_MISSES + 2 {
            let mut timed = [0u64; 3];
            for (j, m) in [(0, MESSAGES[i % MESSAGES.len()]), (1, "")] {
                short_call(rt, &mut rng, &format!("short-{i}-{j}")).await;
                calls += 1;
                timed[j] = missed_read(rt, m).await;
            }
            rt.set_block(AGENT, BlockLabel::Human, &format!("Mark, short {i}."))
                .await
                .expect("block");
            timed[2] = missed_read(rt, MESSAGES[i % MESSAGES.len()]).await;
            if i >= 2 {
                for (v, x) in out.iter_mut().zip(timed) {
                    v.push(x);
                }
            }
        }
        let after = rt
            .summaries(AGENT, SummaryType::Session)
            .await
            .expect("summaries")
            .len();
        assert_eq!(after, before + calls, "every short call was summarized");
        out
    });
    let summary_with = figures(after_summary_with);
    line(
        &format!(
            "context after a new session summary, with a message ({SUMMARY_MISSES} calls of \
             {SHORT_TURNS} turns)"
        ),
        &summary_with,
    );
    let summary_without = figures(after_summary_without);
    line(
        "context after a new session summary, without a message",
        &summary_without,
    );
    line(
        "  context after a block write, with a message, in the same state",
        &figures(after_block),
    );
    println!(
        "  target miss p99 < 5 ms after a new session summary, with a message: {}",
        if summary_with.p99 < 5_000_000 {
            "met"
        } else {
            "MISSED"
        }
    );
    (summary_with, summary_without)
}

/// The criterion group: cached reads with a message and without.
fn criterion_group(tokio: &tokio::runtime::Runtime, rt: &Runtime) {
    let mut c = Criterion::default()
        .configure_from_args()
        .sample_size(20)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(2));
    let mut g = c.benchmark_group("retrieval");
    let mut i = 0;
    g.bench_function("context_with_message", |b| {
        b.iter(|| {
            i += 1;
            tokio.block_on(rt.context(
                AGENT,
                USER,
                MESSAGES[i % MESSAGES.len()],
                BUDGET,
                ContextOptions::default(),
            ))
        })
    });
    g.bench_function("context_without_message", |b| {
        b.iter(|| tokio.block_on(rt.context(AGENT, USER, "", BUDGET, ContextOptions::default())))
    });
    g.finish();
    c.final_summary();
}

/// Rows 23 and 24: cached reads, and misses after a write.
fn record_reads(
    results: &Recorder,
    load: &str,
    cached: &Cached,
    [real_with, real_without]: [&Figures; 2],
    [summary_with, summary_without]: [&Figures; 2],
) {
    let Cached {
        with,
        novel,
        without,
        prepared,
        prepared_without,
    } = cached;
    let ratio = |a: u64, b: u64| a as f64 / b.max(1) as f64;
    results.record(
        &Row::new(
            23,
            "`Runtime::context` with a message (retrieval over the user's 100,003 turns, 1,000 \
             summaries, 1,000 facts), budget 32,000, cached sources, p99 (p50): one of eight \
             messages cycling, a question never asked before, and one whose words were prepared",
            COMMAND,
        )
        .baseline("the same read without a message, interleaved")
        .target("p99 < 1 ms for each")
        .check(On::Figure, "p99", "<", 1.0, "ms")
        .check(On::Figure, "never asked p99", "<", 1.0, "ms")
        .check(On::Figure, "prepared p99", "<", 1.0, "ms"),
        Run::new()
            .figure("p99", ms(with.p99), "ms")
            .figure("p50", ms(with.p50), "ms")
            .figure("never asked p99", ms(novel.p99), "ms")
            .figure("never asked p50", ms(novel.p50), "ms")
            .figure("prepared p99", ms(prepared.p99), "ms")
            .figure("prepared p50", ms(prepared.p50), "ms")
            .base("p99", ms(without.p99), "ms")
            .base("p50", ms(without.p50), "ms")
            .ratio("p99", ratio(with.p99, without.p99))
            .ratio("never asked p99", ratio(novel.p99, without.p99))
            .ratio("prepared p99", ratio(prepared.p99, prepared_without.p99))
            .note(load),
    );
    results.record(
        &Row::new(
            24,
            "The same read after a write for the agent (a cache miss), with a message, p99 \
             (p50): after a block write; after a new session summary",
            COMMAND,
        )
        .baseline("the same misses without a message")
        .target("p99 < 5 ms after either write")
        .check(On::Figure, "block write p99", "<", 5.0, "ms")
        .check(On::Figure, "new summary p99", "<", 5.0, "ms"),
        Run::new()
            .figure("block write p99", ms(real_with.p99), "ms")
            .figure("block write p50", ms(real_with.p50), "ms")
            .figure("new summary p99", ms(summary_with.p99), "ms")
            .figure("new summary p50", ms(summary_with.p50), "ms")
            .base("block write p99", ms(real_without.p99), "ms")
            .base("new summary p99", ms(summary_without.p99), "ms")
            .ratio("block write p99", ratio(real_with.p99, real_without.p99))
            .ratio(
                "new summary p99",
                ratio(summary_with.p99, summary_without.p99),
            )
            .note(load),
    );
}

/// Rows 25 and 26: the index builds, and durable writes under load.
fn record_builds_and_writes(
    results: &Recorder,
    load: &str,
    builds: &Builds,
    writes: &Writes,
    flush_window: u64,
) {
    let Builds {
        times,
        heaps,
        items,
        rss_before,
        rss_after,
    } = builds;
    let (items, rss_before, rss_after) = (*items, *rss_before, *rss_after);
    let Writes {
        alone,
        during_builds,
        during_misses,
    } = writes;
    let ratio = |a: u64, b: u64| a as f64 / b.max(1) as f64;
    let mut build_run = Run::new();
    for t in times {
        build_run = build_run.figure("build", *t as f64 / 1e9, "s");
    }
    for h in heaps {
        build_run = build_run.figure("heap kept", *h as f64 / 1_048_576.0, "MiB");
    }
    results.record(
        &Row::new(
            25,
            "The agent's index build off the Store actor, 102,015 items (100,003 turns), five \
             builds: time, heap kept, resident memory added",
            COMMAND,
        ),
        build_run
            .figure(
                "resident added",
                rss_after.saturating_sub(rss_before) as f64 / 1024.0,
                "MiB",
            )
            .note(&format!("{items} items; {load}")),
    );
    let added = |f: &Figures| ms(f.p99.saturating_sub(alone.p99));
    results.record(
        &Row::new(
            26,
            "`record_turn_durable` (one every 2 ms) while index builds of that agent run back to \
             back, and while cache misses do: p99 (max)",
            COMMAND,
        )
        .baseline("the same writes with nothing else running")
        .target(&format!(
            "what the load adds at p99 within the {flush_window} ms group-commit window"
        ))
        .check(
            On::Figure,
            "builds, added at p99",
            "<=",
            flush_window as f64,
            "ms",
        )
        .check(
            On::Figure,
            "misses, added at p99",
            "<=",
            flush_window as f64,
            "ms",
        ),
        Run::new()
            .figure("builds p99", ms(during_builds.p99), "ms")
            .figure("builds max", ms(during_builds.max), "ms")
            .figure("misses p99", ms(during_misses.p99), "ms")
            .figure("misses max", ms(during_misses.max), "ms")
            .figure("builds, added at p99", added(during_builds), "ms")
            .figure("misses, added at p99", added(during_misses), "ms")
            .base("p99", ms(alone.p99), "ms")
            .base("max", ms(alone.max), "ms")
            .ratio("builds p99", ratio(during_builds.p99, alone.p99))
            .ratio("misses p99", ratio(during_misses.p99, alone.p99))
            .note(load),
    );
}

/// The read `Runtime::context` makes past its cache: every source read
/// from the store (what the cached read must always equal).
fn no_cache() -> ContextOptions {
    ContextOptions {
        use_cache: false,
        ..ContextOptions::default()
    }
}
