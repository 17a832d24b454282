//! Python binding of the simulator (`cctestbed._core`). Thin by design: it parses the
//! normalised JSON trial, runs the simulation with the GIL released, and hands the columnar
//! time series over as NumPy arrays (no per-row Python objects; NumPy is loaded by the first
//! run, not at import). While it runs it checks every [`CHECK_EVERY`] events for a Python signal
//! or a raised [`StopFlag`], so Ctrl-C stops it within a fraction of a second with
//! `KeyboardInterrupt`.

use ccsim::problem::{Key, Path};
use ccsim::qdisc::param::{Fallback, Rule};
use ccsim::sim::SimOutput;
use ccsim::telemetry::{algorithm_columns, Column, ColumnData, CompletionSeries, FlowSeries, RouterSeries};
use ccsim::{SimConfig, Simulation};
use numpy::IntoPyArray;
use pyo3::exceptions::PyValueError;

// A trial that could not run to its end for a reason of its own (a BPF congestion control's
// run-time error), as opposed to a bug: the command reports it in one line, exit code 1.
// (In a module of its own only to quiet a cfg check inside this pyo3 version's macro.)
#[allow(unexpected_cfgs)]
mod trial_failed {
    pyo3::create_exception!(_core, TrialFailed, pyo3::exceptions::PyRuntimeError);
}
use trial_failed::TrialFailed;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

fn parse(config_json: &str) -> PyResult<SimConfig> {
    serde_json::from_str(config_json).map_err(|e| PyValueError::new_err(format!("invalid trial: {e}")))
}

/// Events between two checks for a pending signal or a raised [`StopFlag`]: a few
/// milliseconds of simulation.
const CHECK_EVERY: u64 = 1 << 15;

/// A flag that stops a running simulation when raised. Python sees signals only on its main
/// thread, so a caller that runs the core on another thread (to load modules meanwhile) keeps
/// Ctrl-C on the main thread and raises this flag; the core reads it without the GIL.
#[pyclass(frozen)]
#[derive(Default)]
struct StopFlag(Arc<AtomicBool>);

#[pymethods]
impl StopFlag {
    #[new]
    fn new() -> Self {
        Self::default()
    }

    /// Stops the simulation at its next check; it then raises `KeyboardInterrupt`.
    fn set(&self) {
        self.0.store(true, Ordering::Relaxed);
    }

    fn is_set(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

/// Runs one trial described by the normalised JSON configuration. Without `stop`, a signal
/// handler that raises (Ctrl-C: `KeyboardInterrupt`) stops the run and its exception is raised
/// here; with it, raising the flag stops the run with `KeyboardInterrupt` (signals are then the
/// calling thread's to watch, and the run takes no GIL until it ends).
#[pyfunction]
#[pyo3(signature = (config_json, stop=None))]
fn simulate(py: Python<'_>, config_json: &str, stop: Option<&StopFlag>) -> PyResult<PyObject> {
    let cfg = parse(config_json)?;
    let sim = Simulation::new(cfg).map_err(|errs| {
        PyValueError::new_err(errs.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n"))
    })?;
    let mut interrupted: Option<PyErr> = None;
    let out = py.allow_threads(|| match stop {
        Some(flag) => sim.run_checked(CHECK_EVERY, || !flag.is_set()),
        None => sim.run_checked(CHECK_EVERY, || match Python::with_gil(|py| py.check_signals()) {
            Ok(()) => true,
            Err(e) => {
                interrupted = Some(e);
                false
            }
        }),
    });
    match out {
        Some(out) if out.error.is_some() => Err(TrialFailed::new_err(out.error.unwrap_or_default())),
        Some(out) => {
            load_numpy_api(py)?;
            to_python(py, out)
        }
        None => Err(interrupted.unwrap_or_else(|| pyo3::exceptions::PyKeyboardInterrupt::new_err(()))),
    }
}

/// Problems the core finds in a normalised configuration (empty when valid), each as (path,
/// message): the path as its keys and indices (`["flows", 3, "params", "beta"]`), the message
/// giving the value and what is valid.
#[pyfunction]
fn validate(py: Python<'_>, config_json: &str) -> PyResult<PyObject> {
    let cfg = parse(config_json)?;
    let out = PyList::empty_bound(py);
    for p in cfg.validate().err().unwrap_or_default() {
        let path = PyList::empty_bound(py);
        for k in &p.path.0 {
            match k {
                Key::Field(name) => path.append(name)?,
                Key::Index(i) => path.append(i)?,
            }
        }
        out.append((path, p.message))?;
    }
    Ok(out.into())
}

/// The queue disciplines besides drop-tail, as the core declares them (qdisc/): name -> {doc,
/// params, rules}; each parameter with its trial-file name, the core's key, kind, range,
/// default and meaning.
#[pyfunction]
fn disciplines(py: Python<'_>) -> PyResult<PyObject> {
    let d = PyDict::new_bound(py);
    for q in ccsim::qdisc::disciplines() {
        let params = PyList::empty_bound(py);
        for p in q.params {
            let e = PyDict::new_bound(py);
            e.set_item("name", p.name)?;
            e.set_item("key", p.key)?;
            e.set_item("kind", p.kind.name())?;
            e.set_item("min", p.min)?;
            e.set_item("min_open", p.min_open)?;
            e.set_item("max", p.max)?;
            match p.default {
                Fallback::Number(v) => e.set_item("default", v)?,
                Fallback::Flag(v) => e.set_item("default", v)?,
                Fallback::Derived(how) => e.set_item("default", how)?,
            }
            e.set_item("unit", p.unit)?;
            e.set_item("doc", p.doc.trim())?;
            params.append(e)?;
        }
        let rules = PyList::empty_bound(py);
        for r in q.rules {
            let Rule::Below(a, b) = *r;
            rules.append(("below", a, b))?;
        }
        let e = PyDict::new_bound(py);
        e.set_item("doc", q.doc.trim())?;
        e.set_item("params", params)?;
        e.set_item("rules", rules)?;
        d.set_item(q.name, e)?;
    }
    Ok(d.into())
}

/// The defaults of the settings the front end writes out in full (`ccsim::config::defaults`).
/// `tcp_rmem[2]` for a path of `bdp_bytes` and a queue of `queue_bytes`: what the kernel
/// backend sets on its hosts and the simulator's receivers assume.
#[pyfunction]
fn tcp_rmem_max(bdp_bytes: u64, queue_bytes: u64) -> u64 {
    ccsim::tcp::rcvbuf::tcp_rmem_max(bdp_bytes, queue_bytes)
}

#[pyfunction]
fn defaults(py: Python<'_>) -> PyResult<PyObject> {
    to_py(py, &ccsim::config::defaults())
}

/// A JSON value as the Python object `json.loads` would give.
fn to_py(py: Python<'_>, v: &serde_json::Value) -> PyResult<PyObject> {
    use serde_json::Value;
    Ok(match v {
        Value::Null => py.None(),
        Value::Bool(b) => b.into_py(py),
        Value::Number(n) => match (n.as_u64(), n.as_i64()) {
            (Some(u), _) => u.into_py(py),
            (None, Some(i)) => i.into_py(py),
            _ => n.as_f64().unwrap_or(f64::NAN).into_py(py),
        },
        Value::String(s) => s.into_py(py),
        Value::Array(a) => PyList::new_bound(py, a.iter().map(|x| to_py(py, x)).collect::<PyResult<Vec<_>>>()?).into(),
        Value::Object(o) => {
            let d = PyDict::new_bound(py);
            for (k, x) in o {
                d.set_item(k, to_py(py, x)?)?;
            }
            d.into()
        }
    })
}

/// Algorithm name -> {parameter: default}.
#[pyfunction]
fn algorithms(py: Python<'_>) -> PyResult<PyObject> {
    let d = PyDict::new_bound(py);
    for (name, params) in ccsim::cc::algorithms() {
        let p = PyDict::new_bound(py);
        for (k, v) in params {
            p.set_item(k, v)?;
        }
        d.set_item(name, p)?;
    }
    Ok(d.into())
}

macro_rules! columns {
    ($py:ident, $d:ident, $src:expr, [$($f:ident),* $(,)?]) => {
        $( $d.set_item(stringify!($f), $src.$f.into_pyarray_bound($py))?; )*
    };
}

/// Copies named scalar fields of a struct into a dict under the same names.
macro_rules! fields {
    ($d:ident, $src:expr, [$($f:ident),* $(,)?]) => {
        $( $d.set_item(stringify!($f), $src.$f)?; )*
    };
}

/// A column's values as a NumPy array.
fn column_array(py: Python<'_>, data: ColumnData) -> PyObject {
    match data {
        ColumnData::F64(v) => v.into_pyarray_bound(py).into_any().unbind(),
        ColumnData::U64(v) => v.into_pyarray_bound(py).into_any().unbind(),
        ColumnData::U32(v) => v.into_pyarray_bound(py).into_any().unbind(),
        ColumnData::U16(v) => v.into_pyarray_bound(py).into_any().unbind(),
    }
}

/// Columns as a dict of NumPy arrays, in their declared order.
fn column_dict<'py>(py: Python<'py>, cols: Vec<(String, ColumnData)>) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new_bound(py);
    for (name, data) in cols {
        d.set_item(name, column_array(py, data))?;
    }
    Ok(d)
}

/// The declarations as (name, dtype, unit, doc) tuples.
fn declared(cols: Vec<Column>) -> Vec<(String, &'static str, &'static str, &'static str)> {
    cols.into_iter().map(|c| (c.name, c.dtype.name(), c.unit, c.doc)).collect()
}

/// The columns of `flows`, `router` and `completions` a trial's output holds, in order, each as (name, dtype,
/// unit, doc): the one declaration of the result schema (telemetry.rs). Without a trial, the
/// flow columns leave out the algorithms' `cc.<key>` columns.
#[pyfunction]
#[pyo3(signature = (config_json=None))]
fn columns(py: Python<'_>, config_json: Option<&str>) -> PyResult<PyObject> {
    let keys = match config_json {
        None => vec![],
        Some(j) => {
            let cfg = parse(j)?;
            let mut per_flow = Vec::new();
            for (i, f) in cfg.flows.iter().enumerate() {
                if f.traffic != ccsim::config::Traffic::Tcp {
                    per_flow.push(&[][..]);
                    continue;
                }
                let cc = ccsim::cc::build(&f.cc, &f.params)
                    .map_err(|e| PyValueError::new_err(e.under(&Path::of(&["flows"]).index(i)).to_string()))?;
                per_flow.push(cc.telemetry_keys());
            }
            algorithm_columns(per_flow).0
        }
    };
    let d = PyDict::new_bound(py);
    d.set_item("flows", declared(FlowSeries::trial_columns(&keys)))?;
    d.set_item("router", declared(RouterSeries::columns()))?;
    d.set_item("completions", declared(CompletionSeries::columns()))?;
    Ok(d.into())
}

/// A bottleneck's end-of-run counters and the bytes it still holds.
fn router_final<'py>(py: Python<'py>, rf: &ccsim::qdisc::RouterStats, queued_bytes: u64) -> PyResult<Bound<'py, PyDict>> {
    let rd = PyDict::new_bound(py);
    fields!(rd, rf, [
        arrivals_pkts, arrival_bytes, departures_pkts, departed_bytes, departed_payload_bytes,
        dropped_bytes,
    ]);
    for &c in ccsim::qdisc::DropCause::ALL {
        rd.set_item(format!("drops_{}", c.name()), rf.drops[c])?;
    }
    for &c in ccsim::qdisc::MarkCause::ALL {
        rd.set_item(format!("marks_{}", c.name()), rf.marks[c])?;
    }
    rd.set_item("queued_bytes", queued_bytes)?;
    Ok(rd)
}

fn to_python(py: Python<'_>, out: SimOutput) -> PyResult<PyObject> {
    let res = PyDict::new_bound(py);
    res.set_item("flows", column_dict(py, out.flows.into_columns())?)?;
    let router = column_dict(py, out.router.into_columns())?;
    res.set_item("router", router)?;
    res.set_item("completions", column_dict(py, out.completions.into_columns())?)?;
    res.set_item("state_labels", PyList::new_bound(py, out.state_labels))?;

    let fin = PyDict::new_bound(py);
    let flows_fin = PyList::empty_bound(py);
    for ff in &out.flow_final {
        let d = PyDict::new_bound(py);
        fields!(d, ff, [
            sent_pkts, delivered_pkts, dropped_pkts, marked_pkts, queued_pkts, in_transit_pkts, delivered_bytes,
            retrans_segs, sent_segs, lost_segs, rto_count, tlp_count, undo_count,
        ]);
        flows_fin.append(d)?;
    }
    fin.set_item("flows", flows_fin)?;
    fin.set_item("router", router_final(py, &out.router_final, out.router_queued_bytes)?)?;
    if let Some((rf, queued)) = &out.reverse_final {
        fin.set_item("reverse_router", router_final(py, rf, *queued)?)?;
    }
    fin.set_item("events", out.events)?;
    res.set_item("final", fin)?;
    let caps = PyList::empty_bound(py);
    for c in out.captures {
        caps.append((c.name, pyo3::types::PyBytes::new_bound(py, &c.bytes)))?;
    }
    res.set_item("captures", caps)?;
    Ok(res.into())
}

/// Reads packet captures and returns the per-flow (and, given the router's ingress and egress,
/// router) series on a grid of `interval_ns` from `time_zero_ns` (default: the first packet).
/// `inputs` are (path, point) pairs, point "host", "ingress" or "egress". A file that is
/// missing, not a capture, or without TCP raises ValueError naming it. `discipline` (the
/// router's, `fifo` for drop-tail) lets the router's drops be found by arrival order.
#[pyfunction]
#[pyo3(signature = (inputs, interval_ns, time_zero_ns=None, discipline=None))]
fn analyze(py: Python<'_>, inputs: Vec<(String, String)>, interval_ns: i64, time_zero_ns: Option<i64>, discipline: Option<String>) -> PyResult<PyObject> {
    use ccsim::capture::analyze::analyze_checked as run;
    let parsed = parse_inputs(inputs)?;
    // without the discipline, only each connection's order is assumed
    let arrival_order = match discipline.as_deref() {
        None => false,
        Some(d) => ccsim::qdisc::serves_in_arrival_order(d)
            .ok_or_else(|| PyValueError::new_err(format!("discipline: {d:?} is not one the simulator knows")))?,
    };
    let mut interrupted: Option<PyErr> = None;
    let a = py.allow_threads(|| run(&parsed, interval_ns, time_zero_ns, arrival_order, &mut || signals_ok(&mut interrupted)));
    let a = stopped(a, interrupted)?;
    load_numpy_api(py)?;
    let res = PyDict::new_bound(py);
    let files = PyList::empty_bound(py);
    for f in &a.files {
        let d = PyDict::new_bound(py);
        d.set_item("path", &f.path)?;
        d.set_item("format", f.format)?;
        d.set_item("frames", f.frames)?;
        d.set_item("tcp_packets", f.tcp_packets)?;
        d.set_item("truncated", f.truncated)?;
        d.set_item("first_ns", f.first_t)?;
        d.set_item("last_ns", f.last_t)?;
        files.append(d)?;
    }
    res.set_item("files", files)?;
    let conns = PyList::empty_bound(py);
    for c in &a.connections {
        let d = PyDict::new_bound(py);
        d.set_item("flow", c.flow)?;
        d.set_item("sender", (c.sender.0.clone(), c.sender.1))?;
        d.set_item("receiver", (c.receiver.0.clone(), c.receiver.1))?;
        d.set_item("mss", c.mss)?;
        d.set_item("syn_seen", c.syn_seen)?;
        d.set_item("first_ns", c.first_t)?;
        d.set_item("last_ns", c.last_t)?;
        d.set_item("sender_file", c.sender_file)?;
        d.set_item("receiver_file", c.receiver_file)?;
        d.set_item("per_file", c.per_file.clone())?;
        conns.append(d)?;
    }
    res.set_item("connections", conns)?;
    res.set_item("idle_connections", a.idle_connections)?;
    res.set_item("time_zero_ns", a.time_zero)?;
    res.set_item("flows", column_dict(py, a.flows.into_columns())?)?;
    match a.router {
        Some(r) => {
            let unmatched = r.unmatched;
            let d = column_dict(py, r.into_columns())?;
            d.set_item("unmatched", unmatched)?;
            res.set_item("router", d)?;
        }
        None => res.set_item("router", py.None())?,
    }
    Ok(res.into())
}

/// Whether to go on reading captures: false when a signal handler raised (Ctrl-C), whose
/// exception is kept in `interrupted` to be raised once the GIL is back.
fn signals_ok(interrupted: &mut Option<PyErr>) -> bool {
    match Python::with_gil(|py| py.check_signals()) {
        Ok(()) => true,
        Err(e) => {
            *interrupted = Some(e);
            false
        }
    }
}

/// A capture analysis' result: its error as ValueError, a stop as the signal's exception.
fn stopped<T>(r: Result<T, ccsim::capture::analyze::Stop>, interrupted: Option<PyErr>) -> PyResult<T> {
    use ccsim::capture::analyze::Stop;
    match r {
        Ok(x) => Ok(x),
        Err(Stop::Error(e)) => Err(PyValueError::new_err(e.0)),
        Err(Stop::Stopped) => Err(interrupted.unwrap_or_else(|| pyo3::exceptions::PyKeyboardInterrupt::new_err(()))),
    }
}

fn parse_inputs(inputs: Vec<(String, String)>) -> PyResult<Vec<(String, ccsim::capture::analyze::Point)>> {
    use ccsim::capture::analyze::Point;
    inputs
        .into_iter()
        .map(|(path, point)| {
            let p = match point.as_str() {
                "host" => Point::Host,
                "ingress" => Point::Ingress,
                "egress" => Point::Egress,
                other => return Err(PyValueError::new_err(format!("{path}: unknown capture point {other:?}"))),
            };
            Ok((path, p))
        })
        .collect()
}

/// One flow's packets at its sender for a time-sequence plot: data segments (retransmissions
/// marked), ACKs, SACK blocks, and segments never seen at the receiver. Times in ns from time
/// zero, sequence numbers as byte offsets.
#[pyfunction]
#[pyo3(signature = (inputs, flow, time_zero_ns=None))]
fn tseq(py: Python<'_>, inputs: Vec<(String, String)>, flow: u32, time_zero_ns: Option<i64>) -> PyResult<PyObject> {
    let parsed = parse_inputs(inputs)?;
    let mut interrupted: Option<PyErr> = None;
    let t = py.allow_threads(|| {
        ccsim::capture::analyze::trace_checked(&parsed, flow, time_zero_ns, &mut || signals_ok(&mut interrupted))
    });
    let t = stopped(t, interrupted)?;
    load_numpy_api(py)?;
    let d = PyDict::new_bound(py);
    d.set_item("drops_known", t.drops_known)?;
    columns!(py, d, t, [
        data_t, data_start, data_end, data_retrans, ack_t, ack, sack_t, sack_start, sack_end, drop_t,
        drop_start, drop_end,
    ]);
    Ok(d.into())
}

/// Loads NumPy's C API (once; later calls find it loaded) for the conversion of a run's
/// columns, after the run, so that a caller can load NumPy on another thread while the core
/// runs. A Ctrl-C that interrupts the loading (or is pending) is raised as `KeyboardInterrupt`
/// instead of the conversion's panic; any other failure is left for the first conversion to
/// report. Not at import: `validate`, `algorithms`, `disciplines` and `defaults` need no
/// NumPy, and importing it costs a command a tenth of a second.
fn load_numpy_api(py: Python<'_>) -> PyResult<()> {
    py.check_signals()?;
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {})); // the failure is handled below, not printed
    let loaded = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _ = numpy::PyArray1::<f64>::zeros_bound(py, 0, false);
    }));
    std::panic::set_hook(hook);
    if let Err(payload) = loaded {
        let msg = payload
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| payload.downcast_ref::<&str>().copied())
            .unwrap_or("");
        if msg.contains("KeyboardInterrupt") {
            return Err(pyo3::exceptions::PyKeyboardInterrupt::new_err(()));
        }
        py.check_signals()?;
    }
    Ok(())
}

/// One datagram flow's send times, as the simulator sends them
/// ([`ccsim::datagram::DatagramClock`]): the kernel backend's udp and ping senders follow it, so
/// both backends send the same datagrams at the same trial times.
#[pyclass]
struct DatagramClock(ccsim::datagram::DatagramClock);

#[pymethods]
impl DatagramClock {
    /// `traffic_json`: the flow's core `traffic` (`{"kind": "udp", ...}`); `flow`: its index in
    /// the trial; times in ns of trial time.
    #[new]
    fn new(traffic_json: &str, seed: u64, flow: u32, start_ns: i64, duration_ns: i64) -> PyResult<Self> {
        let traffic: ccsim::config::Traffic =
            serde_json::from_str(traffic_json).map_err(|e| PyValueError::new_err(format!("invalid traffic: {e}")))?;
        let d = ccsim::datagram::DatagramFlow::for_traffic(flow, &traffic, seed, duration_ns)
            .ok_or_else(|| PyValueError::new_err("a tcp flow has no datagram clock"))?;
        Ok(DatagramClock(ccsim::datagram::DatagramClock::new(d, start_ns, duration_ns)))
    }

    /// The next datagram's send time, and the clock moves past it; None once the trial ends.
    fn pop(&mut self) -> Option<i64> {
        self.0.pop()
    }

    /// Whether the flow is in an on period at `t_ns`.
    fn is_on(&self, t_ns: i64) -> bool {
        self.0.is_on(t_ns)
    }
}

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<StopFlag>()?;
    m.add_class::<DatagramClock>()?;
    m.add_function(wrap_pyfunction!(simulate, m)?)?;
    m.add_function(wrap_pyfunction!(validate, m)?)?;
    m.add_function(wrap_pyfunction!(algorithms, m)?)?;
    m.add_function(wrap_pyfunction!(disciplines, m)?)?;
    m.add_function(wrap_pyfunction!(defaults, m)?)?;
    m.add_function(wrap_pyfunction!(columns, m)?)?;
    m.add_function(wrap_pyfunction!(analyze, m)?)?;
    m.add_function(wrap_pyfunction!(tcp_rmem_max, m)?)?;
    m.add_function(wrap_pyfunction!(tseq, m)?)?;
    m.add("TrialFailed", m.py().get_type_bound::<TrialFailed>())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
