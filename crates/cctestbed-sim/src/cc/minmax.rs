//! Windowed max/min filter of Kathleen Nichols' algorithm, as Linux `lib/win_minmax.c`:
//! the best, second-best and third-best samples from successive sub-windows are kept, so
//! the running max (or min) over a sliding window costs O(1) per sample.

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Sample {
    t: u64,
    v: u64,
}

#[derive(Debug, Clone, Default)]
pub struct MinMax {
    s: [Sample; 3],
}

impl MinMax {
    pub fn get(&self) -> u64 {
        self.s[0].v
    }

    pub fn reset(&mut self, t: u64, v: u64) -> u64 {
        self.s = [Sample { t, v }; 3];
        v
    }

    /// `minmax_subwin_update`: age out sub-window choices.
    fn subwin_update(&mut self, win: u64, val: Sample) -> u64 {
        let dt = val.t.wrapping_sub(self.s[0].t);
        if dt > win {
            // The whole window passed without a new best: promote the next choices.
            self.s[0] = self.s[1];
            self.s[1] = self.s[2];
            self.s[2] = val;
            if val.t.wrapping_sub(self.s[0].t) > win {
                self.s[0] = self.s[1];
                self.s[1] = self.s[2];
                self.s[2] = val;
            }
        } else if self.s[1].t == self.s[0].t && dt > win / 4 {
            // A quarter of the window without a new value: take a 2nd choice.
            self.s[2] = val;
            self.s[1] = val;
        } else if self.s[2].t == self.s[1].t && dt > win / 2 {
            // Half the window: take a 3rd choice from the last half.
            self.s[2] = val;
        }
        self.s[0].v
    }

    /// `minmax_running_max`: windowed max of `v` over the last `win` units of `t`.
    pub fn running_max(&mut self, win: u64, t: u64, v: u64) -> u64 {
        let val = Sample { t, v };
        if val.v >= self.s[0].v || val.t.wrapping_sub(self.s[2].t) > win {
            return self.reset(t, v);
        }
        if val.v >= self.s[1].v {
            self.s[2] = val;
            self.s[1] = val;
        } else if val.v >= self.s[2].v {
            self.s[2] = val;
        }
        self.subwin_update(win, val)
    }

    /// `minmax_running_min`.
    pub fn running_min(&mut self, win: u64, t: u64, v: u64) -> u64 {
        let val = Sample { t, v };
        if val.v <= self.s[0].v || val.t.wrapping_sub(self.s[2].t) > win {
            return self.reset(t, v);
        }
        if val.v <= self.s[1].v {
            self.s[2] = val;
            self.s[1] = val;
        } else if val.v <= self.s[2].v {
            self.s[2] = val;
        }
        self.subwin_update(win, val)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// The estimate is always a value seen within the window and at least the most recent
        /// sample; it never exceeds the true windowed max.
        #[test]
        fn running_max_is_bounded_by_the_true_window_max(vals in proptest::collection::vec(0u64..1000, 1..200)) {
            let win = 10;
            let mut m = MinMax::default();
            for (t, &v) in vals.iter().enumerate() {
                let got = m.running_max(win, t as u64, v);
                let lo = t.saturating_sub(win as usize);
                let true_max = vals[lo..=t].iter().copied().max().unwrap();
                prop_assert!(got <= true_max);
                prop_assert!(got >= v);
                let start = t.saturating_sub(2 * win as usize);
                prop_assert!(vals[start..=t].contains(&got));
            }
        }
    }

    #[test]
    fn a_max_expires_after_the_window() {
        let mut m = MinMax::default();
        m.running_max(10, 0, 100);
        for t in 1..=10 {
            assert_eq!(m.running_max(10, t, 50), 100);
        }
        assert_eq!(m.running_max(10, 11, 50), 50);
    }
}
