//! What is wrong with a trial's settings: where ([`Path`], the keys and indices from the top of
//! the trial as its JSON names them, `link.aqm.alpha` or `flows[3].params.beta`) and what (the
//! value and what would be valid). Each part of the configuration checks its own settings at the
//! path it is given; the Python front end receives the path as parts, so it can rewrite a flow's
//! index into its group's and name the field as the trial file does, without reading the text.

use std::fmt;

/// One step of a [`Path`]: a key of a table or an index into an array.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Key {
    Field(String),
    Index(usize),
}

/// Where a setting sits in the trial.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Path(pub Vec<Key>);

impl Path {
    /// The top of the trial.
    pub fn root() -> Self {
        Path(Vec::new())
    }

    /// The key `name` below this path.
    pub fn field(&self, name: &str) -> Self {
        let mut p = self.clone();
        p.0.push(Key::Field(name.to_string()));
        p
    }

    /// The element `i` of the array at this path.
    pub fn index(&self, i: usize) -> Self {
        let mut p = self.clone();
        p.0.push(Key::Index(i));
        p
    }

    /// A path of keys, from the top.
    pub fn of(names: &[&str]) -> Self {
        names.iter().fold(Path::root(), |p, n| p.field(n))
    }

    /// A problem with the setting at this path.
    pub fn problem(&self, message: impl Into<String>) -> Problem {
        Problem { path: self.clone(), message: message.into() }
    }
}

impl fmt::Display for Path {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, k) in self.0.iter().enumerate() {
            match k {
                Key::Field(name) if i == 0 => write!(f, "{name}")?,
                Key::Field(name) => write!(f, ".{name}")?,
                Key::Index(n) => write!(f, "[{n}]")?,
            }
        }
        Ok(())
    }
}

/// A setting that cannot run: its path, and a message giving the value and what is valid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub path: Path,
    pub message: String,
}

impl Problem {
    /// The same problem found by a part that checks settings relative to itself (`params.beta`
    /// of an algorithm), placed under `at` (`flows[3]`).
    pub fn under(mut self, at: &Path) -> Self {
        let mut path = at.0.clone();
        path.append(&mut self.path.0);
        self.path = Path(path);
        self
    }
}

/// `path: message`, as the trial's problems are listed.
impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

/// Every problem found in a trial (empty when it can run).
pub type Problems = Vec<Problem>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_read_as_the_trial_names_them() {
        let p = Path::of(&["flows"]).index(3).field("params").field("beta");
        assert_eq!(p.to_string(), "flows[3].params.beta");
        let e = Path::of(&["params", "beta"]).problem("9: must be in [0, 1]").under(&Path::of(&["flows"]).index(0));
        assert_eq!(e.to_string(), "flows[0].params.beta: 9: must be in [0, 1]");
    }
}
