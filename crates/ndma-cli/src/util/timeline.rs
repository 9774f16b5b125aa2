//! A `tracing` layer that records the op layer's spans and events with their times, and the writer that
//! merges them with the device model's engine events into a Chrome/Perfetto trace (JSON "trace event
//! format": complete events `X`, instant events `i`, thread-name metadata `M`).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use ndma_emu::{EngineEvent, EngineEventKind};
use serde_json::{json, Value};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id};
use tracing::{Event, Subscriber};
use tracing_subscriber::layer::Context;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

/// One recorded op-layer span or event.
#[derive(Debug, Clone)]
pub struct OpRecord {
    /// Span or event name (an event's message).
    pub name: String,
    /// Start.
    pub start: Instant,
    /// End (equal to `start` for events).
    pub end: Instant,
    /// Recording thread.
    pub thread: String,
    /// `key=value` fields.
    pub fields: String,
    /// True for spans (durations), false for instantaneous events.
    pub is_span: bool,
}

/// The recording layer; clone it to read what it recorded.
#[derive(Clone, Default)]
pub struct Timeline {
    records: Arc<Mutex<Vec<OpRecord>>>,
}

#[derive(Default)]
struct Fields {
    message: Option<String>,
    rest: String,
}

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.message = Some(format!("{value:?}"));
        } else {
            let _ = write!(self.rest, "{}{}={value:?}", if self.rest.is_empty() { "" } else { " " }, field.name());
        }
    }
}

struct SpanStart {
    start: Instant,
    fields: String,
}

fn thread_label() -> String {
    let t = std::thread::current();
    t.name().map_or_else(|| format!("{:?}", t.id()), str::to_string)
}

impl Timeline {
    /// Everything recorded so far, in recording order.
    pub fn records(&self) -> Vec<OpRecord> {
        self.records.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn push(&self, r: OpRecord) {
        self.records.lock().unwrap_or_else(|p| p.into_inner()).push(r);
    }
}

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Timeline {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut f = Fields::default();
        attrs.record(&mut f);
        if let Some(span) = ctx.span(id) {
            span.extensions_mut().insert(SpanStart { start: Instant::now(), fields: f.rest });
        }
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(&id) else { return };
        let ext = span.extensions();
        if let Some(s) = ext.get::<SpanStart>() {
            self.push(OpRecord {
                name: span.name().to_string(),
                start: s.start,
                end: Instant::now(),
                thread: thread_label(),
                fields: s.fields.clone(),
                is_span: true,
            });
        }
    }

    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        let mut f = Fields::default();
        event.record(&mut f);
        let now = Instant::now();
        self.push(OpRecord {
            name: f.message.unwrap_or_else(|| event.metadata().name().to_string()),
            start: now,
            end: now,
            thread: thread_label(),
            fields: f.rest,
            is_span: false,
        });
    }
}

fn us(epoch: Instant, t: Instant) -> f64 {
    t.saturating_duration_since(epoch).as_nanos() as f64 / 1000.0
}

static INSTALLED: std::sync::OnceLock<Timeline> = std::sync::OnceLock::new();

/// Makes `t` the recorder `ndma trace` reads (main installs it in the global subscriber).
pub fn install(t: Timeline) {
    let _ = INSTALLED.set(t);
}

/// The installed recorder, if any.
pub fn installed() -> Option<Timeline> {
    INSTALLED.get().cloned()
}

/// Builds the Chrome trace JSON: op-layer records on their threads, engine events on one track per engine.
pub fn chrome_trace(epoch: Instant, ops: &[OpRecord], engines: &[EngineEvent]) -> Value {
    let mut tids: BTreeMap<String, u64> = BTreeMap::new();
    let mut tid = |label: String| {
        let next = tids.len() as u64 + 1;
        *tids.entry(label).or_insert(next)
    };
    let mut events = Vec::new();
    for r in ops {
        let t = tid(format!("op layer: {}", r.thread));
        let ph = if r.is_span { "X" } else { "i" };
        let mut e = json!({"name": r.name, "cat": "ndma", "ph": ph, "ts": us(epoch, r.start), "pid": 1, "tid": t,
            "args": {"fields": r.fields}});
        if r.is_span {
            e["dur"] = json!(us(r.start, r.end));
        } else {
            e["s"] = json!("t");
        }
        events.push(e);
    }
    for ev in engines {
        let t = tid(format!("engine {}", ev.engine));
        let (name, args) = match ev.kind {
            EngineEventKind::Doorbell { dir, count } => {
                (format!("doorbell {dir}"), json!({"count": count, "qid": ev.qid}))
            }
            EngineEventKind::Batch { descriptors, bytes } => {
                ("execute".to_string(), json!({"descriptors": descriptors, "bytes": bytes, "qid": ev.qid}))
            }
            EngineEventKind::Drain => ("drain posted writes".to_string(), json!({})),
            EngineEventKind::Fault(kind) => (format!("fault: {kind}"), json!({"qid": ev.qid})),
        };
        let mut e = json!({"name": name, "cat": "engine", "ts": us(epoch, ev.start), "pid": 1, "tid": t, "args": args});
        if ev.end > ev.start {
            e["ph"] = json!("X");
            e["dur"] = json!(us(ev.start, ev.end));
        } else {
            e["ph"] = json!("i");
            e["s"] = json!("t");
        }
        events.push(e);
    }
    for (label, t) in tids {
        events.push(json!({"name": "thread_name", "ph": "M", "pid": 1, "tid": t, "args": {"name": label}}));
    }
    json!({"traceEvents": events, "displayTimeUnit": "ns"})
}
