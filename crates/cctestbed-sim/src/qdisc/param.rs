//! A discipline's parameters, declared once with their meaning, default and range: the settings
//! struct the trial's JSON is read into, the range checks, and what the core exports
//! ([`super::disciplines`]) so that the Python schema builds its checks from the same
//! declaration. [`params!`](crate::qdisc_params) writes the struct and its table from one list.

use crate::problem::{Path, Problem};

/// What a parameter holds, and so how a trial file writes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A time in nanoseconds (`"5ms"` in a trial file).
    Time,
    /// Bytes (`"3KB"`).
    Size,
    /// Bits per second (`"10Mbit"`).
    Rate,
    /// A whole number, written as one (`64`).
    Count,
    /// A whole number, which may be written as a float (`2` or `2.0`).
    Whole,
    /// Any finite number.
    Real,
    /// A fraction of one (`"2%"` or `0.02`).
    Fraction,
    /// On or off.
    Flag,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Time => "time",
            Kind::Size => "size",
            Kind::Rate => "rate",
            Kind::Count => "count",
            Kind::Whole => "whole",
            Kind::Real => "real",
            Kind::Fraction => "fraction",
            Kind::Flag => "flag",
        }
    }
}

/// What a parameter is when the trial leaves it out.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Fallback {
    /// This number (in the kind's unit: ns, bytes, bit/s).
    Number(f64),
    /// On or off.
    Flag(bool),
    /// Worked out from the link or other parameters, as said (`"the device MTU"`); or off.
    Derived(&'static str),
}

/// One parameter: its names, kind, range, default and meaning.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Param {
    /// The name in trial files, as `tc` spells it (`target`).
    pub name: &'static str,
    /// The key in the core's JSON (`target_ns`), the settings struct's field.
    pub key: &'static str,
    pub kind: Kind,
    /// The smallest valid value; `min_open`: the bound itself is not valid.
    pub min: Option<f64>,
    pub min_open: bool,
    /// The largest valid value (inclusive); `None`: what the kind holds.
    pub max: Option<f64>,
    pub default: Fallback,
    /// Words for the unit the range is in, where the kind does not say it (`Hz`, `sixteenths`).
    pub unit: &'static str,
    /// What it means (the field's doc comment).
    pub doc: &'static str,
}

impl Param {
    pub const fn new(name: &'static str, kind: Kind) -> Self {
        Param { name, key: "", kind, min: None, min_open: false, max: None, default: Fallback::Derived("off"), unit: "", doc: "" }
    }
    /// Valid from `lo` on.
    pub const fn min(self, lo: f64) -> Self {
        Param { min: Some(lo), min_open: false, ..self }
    }
    /// Valid above `lo`.
    pub const fn above(self, lo: f64) -> Self {
        Param { min: Some(lo), min_open: true, ..self }
    }
    /// Valid from `lo` to `hi`.
    pub const fn range(self, lo: f64, hi: f64) -> Self {
        Param { min: Some(lo), min_open: false, max: Some(hi), ..self }
    }
    pub const fn max(self, hi: f64) -> Self {
        Param { max: Some(hi), ..self }
    }
    pub const fn default(self, v: f64) -> Self {
        Param { default: Fallback::Number(v), ..self }
    }
    pub const fn default_flag(self, on: bool) -> Self {
        Param { default: Fallback::Flag(on), ..self }
    }
    pub const fn derived(self, how: &'static str) -> Self {
        Param { default: Fallback::Derived(how), ..self }
    }
    pub const fn unit(self, words: &'static str) -> Self {
        Param { unit: words, ..self }
    }
    /// The key and doc, which [`params!`](crate::qdisc_params) fills in from the field.
    pub const fn field(self, key: &'static str, doc: &'static str) -> Self {
        Param { key, doc, ..self }
    }

    /// Whether `v` is in range.
    pub fn holds(&self, v: f64) -> bool {
        let above = match self.min {
            None => true,
            Some(lo) if self.min_open => v > lo,
            Some(lo) => v >= lo,
        };
        v.is_finite() && above && self.max.is_none_or(|hi| v <= hi)
    }

    /// What is valid, in words: "must be > 0", "must be from 1 to 65536 (percent)".
    pub fn valid(&self) -> String {
        let whole = matches!(self.kind, Kind::Time | Kind::Size | Kind::Rate | Kind::Count | Kind::Whole);
        let range = match (self.min, self.max) {
            (Some(lo), None) if self.min_open || (whole && lo == 1.0) => format!("must be > {}", if self.min_open { lo } else { lo - 1.0 }),
            (Some(lo), None) => format!("must be >= {lo}"),
            (Some(lo), Some(hi)) if self.min_open => format!("must be in ({lo}, {hi}]"),
            (Some(lo), Some(hi)) => format!("must be from {lo} to {hi}"),
            (None, Some(hi)) => format!("must be at most {hi}"),
            (None, None) => "must be a finite number".to_string(),
        };
        if self.unit.is_empty() {
            range
        } else {
            format!("{range} ({})", self.unit)
        }
    }
}

/// A parameter's value, as a check reads it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Value {
    Int(i128),
    Real(f64),
    Flag(bool),
}

impl std::fmt::Display for Value {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Value::Int(v) => write!(f, "{v}"),
            Value::Real(v) => write!(f, "{v}"),
            Value::Flag(v) => write!(f, "{v}"),
        }
    }
}

macro_rules! value_from {
    ($variant:ident as $wide:ty: $($t:ty),*) => {
        $( impl From<$t> for Value {
            fn from(v: $t) -> Self {
                Value::$variant(v as $wide)
            }
        } )*
    };
}
value_from!(Int as i128: u8, u32, u64, i64);
value_from!(Real as f64: f64);
value_from!(Flag as bool: bool);

/// A rule between two parameters beyond each one's range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    /// The first, when both are given, must be below the second (RED's `min` below `max`).
    Below(&'static str, &'static str),
}

/// A discipline's settings: the struct [`params!`](crate::qdisc_params) declares.
pub trait Settings {
    /// What the discipline is, one line (the struct's doc comment).
    const DOC: &'static str;
    /// Its parameters, in the struct's order.
    const PARAMS: &'static [Param];
    /// Rules between its parameters.
    const RULES: &'static [Rule] = &[];
    /// The given values, in the order of [`Settings::PARAMS`] (`None` where left out).
    fn values(&self) -> Vec<Option<Value>>;

    /// Each given value in its range, and the rules kept; problems are at `at` (`link.aqm`).
    fn check(&self, at: &Path, out: &mut Vec<Problem>) {
        let values = self.values();
        for (p, v) in Self::PARAMS.iter().zip(&values) {
            let number = match *v {
                Some(Value::Int(i)) => i as f64,
                Some(Value::Real(x)) => x,
                _ => continue,
            };
            if !p.holds(number) {
                out.push(at.field(p.key).problem(format!("{}: {}", v.expect("given"), p.valid())));
            }
        }
        let given = |key: &str| Self::PARAMS.iter().position(|p| p.key == key).and_then(|i| values[i]);
        for rule in Self::RULES {
            let Rule::Below(a, b) = *rule;
            if let (Some(x), Some(y)) = (given(a), given(b)) {
                let (xf, yf) = (number_of(x), number_of(y));
                if xf >= yf {
                    out.push(at.field(a).problem(format!("{x}: must be below {b} ({y})")));
                }
            }
        }
    }
}

fn number_of(v: Value) -> f64 {
    match v {
        Value::Int(i) => i as f64,
        Value::Real(x) => x,
        Value::Flag(b) => b as u8 as f64,
    }
}

/// Declares a discipline's settings: every parameter an `Option` (absent takes the default),
/// read from the trial's JSON under its field name, with the [`Param`] that describes it; the
/// doc comments are the parameters' meanings. Implements [`Settings`].
#[macro_export]
macro_rules! qdisc_params {
    (
        $(#[doc = $doc:literal])*
        pub struct $name:ident {
            $( $(#[doc = $fdoc:literal])* $field:ident : $ty:ty = $spec:expr, )*
        }
        $(rules: $rules:expr;)?
    ) => {
        $(#[doc = $doc])*
        #[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        pub struct $name {
            $( $(#[doc = $fdoc])* #[serde(default)] pub $field: Option<$ty>, )*
        }

        impl $crate::qdisc::param::Settings for $name {
            const DOC: &'static str = concat!($($doc),*);
            const PARAMS: &'static [$crate::qdisc::param::Param] =
                &[ $( $spec.field(stringify!($field), concat!($($fdoc),*)) ),* ];
            $(const RULES: &'static [$crate::qdisc::param::Rule] = $rules;)?
            fn values(&self) -> Vec<Option<$crate::qdisc::param::Value>> {
                vec![ $( self.$field.map(Into::into) ),* ]
            }
        }
    };
}
