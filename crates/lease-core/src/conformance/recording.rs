//! A [`metrics::Recorder`] that keeps every value in memory, for the tests that check each
//! documented metric moves (feature `metrics` as well as `conformance`), and a renderer of the
//! Prometheus text format for the example that shows them.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use metrics::{
    Counter, CounterFn, Gauge, GaugeFn, Histogram, HistogramFn, Key, KeyName, Metadata, Recorder,
    SharedString, Unit,
};

use crate::sync::lock;

/// One series: a metric name and its labels, sorted.
pub type Series = (String, Vec<(String, String)>);

/// Every value recorded, by series.
#[derive(Clone, Debug, Default)]
pub struct CapturedMetrics {
    values: Arc<Mutex<BTreeMap<Series, Arc<SeriesValue>>>>,
}

/// What one series holds.
#[derive(Debug, Default)]
pub struct SeriesValue {
    kind: Mutex<Kind>,
    counter: AtomicU64,
    samples: Mutex<Vec<f64>>,
    gauge: Mutex<f64>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Kind {
    #[default]
    Counter,
    Gauge,
    Histogram,
}

impl CounterFn for SeriesValue {
    fn increment(&self, value: u64) {
        self.counter.fetch_add(value, Ordering::Relaxed);
    }
    fn absolute(&self, value: u64) {
        self.counter.fetch_max(value, Ordering::Relaxed);
    }
}

impl GaugeFn for SeriesValue {
    fn increment(&self, value: f64) {
        *lock(&self.gauge) += value;
    }
    fn decrement(&self, value: f64) {
        *lock(&self.gauge) -= value;
    }
    fn set(&self, value: f64) {
        *lock(&self.gauge) = value;
    }
}

impl HistogramFn for SeriesValue {
    fn record(&self, value: f64) {
        lock(&self.samples).push(value);
    }
}

fn series(key: &Key) -> Series {
    let mut labels: Vec<(String, String)> = key
        .labels()
        .map(|l| (l.key().to_owned(), l.value().to_owned()))
        .collect();
    labels.sort();
    (key.name().to_owned(), labels)
}

impl CapturedMetrics {
    /// A recording with nothing in it yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Installs a clone of this recording as the process's global recorder.
    ///
    /// # Errors
    /// When a global recorder is already installed.
    pub fn install(&self) -> Result<(), metrics::SetRecorderError<Self>> {
        metrics::set_global_recorder(self.clone())
    }

    fn value(&self, key: &Key, kind: Kind) -> Arc<SeriesValue> {
        let value = lock(&self.values).entry(series(key)).or_default().clone();
        *lock(&value.kind) = kind;
        value
    }

    fn matching(&self, name: &str, labels: &[(&str, &str)]) -> Vec<Arc<SeriesValue>> {
        lock(&self.values)
            .iter()
            .filter(|((n, ls), _)| {
                n == name
                    && labels
                        .iter()
                        .all(|(k, v)| ls.iter().any(|(lk, lv)| lk == k && lv == v))
            })
            .map(|(_, v)| v.clone())
            .collect()
    }

    /// The sum of the counters named `name` whose labels include `labels`.
    pub fn counter(&self, name: &str, labels: &[(&str, &str)]) -> u64 {
        self.matching(name, labels)
            .iter()
            .map(|v| v.counter.load(Ordering::Relaxed))
            .sum()
    }

    /// The values of the gauges named `name` whose labels include `labels`.
    pub fn gauges(&self, name: &str, labels: &[(&str, &str)]) -> Vec<f64> {
        self.matching(name, labels)
            .iter()
            .map(|v| *lock(&v.gauge))
            .collect()
    }

    /// Every sample of the histograms named `name` whose labels include `labels`.
    pub fn samples(&self, name: &str, labels: &[(&str, &str)]) -> Vec<f64> {
        self.matching(name, labels)
            .iter()
            .flat_map(|v| lock(&v.samples).clone())
            .collect()
    }

    /// Every series recorded so far.
    pub fn series(&self) -> Vec<Series> {
        lock(&self.values).keys().cloned().collect()
    }

    /// Everything recorded, in the Prometheus text exposition format: counters and gauges as
    /// they are, histograms as summaries (quantiles 0.5, 0.9 and 1, `_sum` and `_count`).
    pub fn render(&self) -> String {
        let values = lock(&self.values);
        let mut out = String::new();
        let mut typed = None;
        for ((name, labels), value) in values.iter() {
            let kind = *lock(&value.kind);
            if typed.as_deref() != Some(name.as_str()) {
                let shown = match kind {
                    Kind::Counter => "counter",
                    Kind::Gauge => "gauge",
                    Kind::Histogram => "summary",
                };
                let _ = writeln!(out, "# TYPE {name} {shown}");
                typed = Some(name.clone());
            }
            let shown = |extra: Option<(&str, String)>| {
                let mut all: Vec<String> = labels
                    .iter()
                    .map(|(k, v)| format!("{k}=\"{}\"", escape(v)))
                    .collect();
                if let Some((k, v)) = extra {
                    all.push(format!("{k}=\"{v}\""));
                }
                if all.is_empty() {
                    String::new()
                } else {
                    format!("{{{}}}", all.join(","))
                }
            };
            match kind {
                Kind::Counter => {
                    let _ = writeln!(
                        out,
                        "{name}{} {}",
                        shown(None),
                        value.counter.load(Ordering::Relaxed)
                    );
                }
                Kind::Gauge => {
                    let _ = writeln!(out, "{name}{} {}", shown(None), *lock(&value.gauge));
                }
                Kind::Histogram => {
                    let mut samples = lock(&value.samples).clone();
                    samples.sort_by(f64::total_cmp);
                    for q in [0.5, 0.9, 1.0] {
                        let at = ((samples.len() as f64 - 1.0) * q).round().max(0.0) as usize;
                        let v = samples.get(at).copied().unwrap_or(0.0);
                        let _ = writeln!(
                            out,
                            "{name}{} {v}",
                            shown(Some(("quantile", q.to_string())))
                        );
                    }
                    let sum: f64 = samples.iter().sum();
                    let _ = writeln!(out, "{name}_sum{} {sum}", shown(None));
                    let _ = writeln!(out, "{name}_count{} {}", shown(None), samples.len());
                }
            }
        }
        out
    }
}

/// Escapes a label value as the text format needs.
fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

impl Recorder for CapturedMetrics {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}

    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        Counter::from_arc(self.value(key, Kind::Counter))
    }

    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::from_arc(self.value(key, Kind::Gauge))
    }

    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::from_arc(self.value(key, Kind::Histogram))
    }
}
