//! The statistics the benches report: the median (of rounds, of per-round ratios)
//! and the spread of per-round ratios.
//!
//! The machine the benches run on is shared, so a single round is noisy: each bench
//! measures every client or mode once per round, reports the median round, and
//! compares two of them by the median of their per-round ratios, with that ratio's
//! [`Spread`].

use std::cmp::Ordering;

/// The median of `items` by `cmp`: the middle one once sorted, the upper of the two
/// middle ones for an even count; `None` when there is none.
pub fn median_by<T>(items: &[T], mut cmp: impl FnMut(&T, &T) -> Ordering) -> Option<&T> {
    let mut sorted: Vec<&T> = items.iter().collect();
    sorted.sort_by(|a, b| cmp(a, b));
    sorted.get(sorted.len() / 2).copied()
}

/// The median of `v`, as [`median_by`] takes it; `None` when `v` is empty.
pub fn median(v: &[f64]) -> Option<f64> {
    median_by(v, f64::total_cmp).copied()
}

/// How far a set of figures (per-round ratios) is spread around its median.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Spread {
    /// The median, as [`median`] takes it.
    pub median: f64,
    /// The interquartile range over the median.
    pub iqr_over_median: f64,
    /// The smallest figure.
    pub min: f64,
    /// The largest figure.
    pub max: f64,
}

/// The median of `v`, its interquartile range over the median and its full range;
/// `None` when `v` is empty.
///
/// A quartile is the figure at that fraction of the sorted figures' index range,
/// rounded to the nearest index (so with five figures the quartiles are the second
/// and the fourth).
pub fn spread(v: &[f64]) -> Option<Spread> {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    let (&min, &max) = (v.first()?, v.last()?);
    let at = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
    let median = at(0.5);
    Some(Spread { median, iqr_over_median: (at(0.75) - at(0.25)) / median, min, max })
}

/// The per-round ratios `a[i] / b[i]` of two figures measured in the same rounds
/// (as many as the shorter has).
pub fn ratios(a: &[f64], b: &[f64]) -> Vec<f64> {
    a.iter().zip(b).map(|(x, y)| x / y).collect()
}

/// `x` rounded to `decimals` places, for the JSON (which the benches write with
/// as many places as the figure means).
pub fn rounded(x: f64, decimals: i32) -> f64 {
    let scale = 10f64.powi(decimals);
    (x * scale).round() / scale
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even_counts() {
        let check = |v: &[f64], expected: Option<f64>| assert_eq!(median(v), expected, "{v:?}");
        check(&[], None);
        check(&[4.0], Some(4.0));
        check(&[3.0, 1.0, 2.0], Some(2.0));
        // Even: the upper of the two middle figures.
        check(&[4.0, 1.0, 3.0, 2.0], Some(3.0));
        check(&[2.0, 1.0], Some(2.0));
        check(&[5.0, 1.0, 4.0, 2.0, 3.0, 9.0], Some(4.0));
    }

    #[test]
    fn median_by_a_key() {
        let rounds = [("a", 30), ("b", 10), ("c", 20), ("d", 40), ("e", 50)];
        assert_eq!(median_by(&rounds, |x, y| x.1.cmp(&y.1)), Some(&("a", 30)));
        assert_eq!(median_by(&rounds[..2], |x, y| x.1.cmp(&y.1)), Some(&("a", 30)));
        assert_eq!(median_by(&[] as &[(&str, u32)], |x, y| x.1.cmp(&y.1)), None);
    }

    #[test]
    fn spread_of_ratios() {
        let check = |v: &[f64], expected: Option<Spread>| assert_eq!(spread(v), expected, "{v:?}");
        check(&[], None);
        check(&[2.0], Some(Spread { median: 2.0, iqr_over_median: 0.0, min: 2.0, max: 2.0 }));
        // Five: the quartiles are the second and the fourth figure.
        check(&[1.0, 0.5, 2.0, 0.75, 1.25], Some(Spread { median: 1.0, iqr_over_median: 0.5, min: 0.5, max: 2.0 }));
        // Four: indices 0.75 -> 1 and 2.25 -> 2 of 0..3; the median the upper middle.
        check(&[4.0, 1.0, 3.0, 2.0], Some(Spread { median: 3.0, iqr_over_median: 1.0 / 3.0, min: 1.0, max: 4.0 }));
        check(&[2.0, 1.0], Some(Spread { median: 2.0, iqr_over_median: 0.5, min: 1.0, max: 2.0 }));
    }

    #[test]
    fn the_spread_median_is_the_median() {
        for len in 1..12 {
            let v: Vec<f64> = (0..len).map(|i| f64::from((i * 7) % 11)).collect();
            assert_eq!(spread(&v).map(|s| s.median), median(&v), "{v:?}");
        }
    }

    #[test]
    fn per_round_ratios() {
        assert_eq!(ratios(&[2.0, 3.0, 9.0], &[1.0, 6.0]), vec![2.0, 0.5]);
        assert!(ratios(&[], &[1.0]).is_empty());
    }

    #[test]
    fn rounding_for_the_json() {
        assert_eq!(rounded(0.912_49, 3), 0.912);
        assert_eq!(rounded(12_345.6, 0), 12_346.0);
        assert_eq!(rounded(-3.25, 1), -3.3);
    }
}
