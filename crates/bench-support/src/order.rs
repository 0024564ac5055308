//! The order in which the clients of an interleaved bench take their slices, round
//! by round.

/// The order of `n` clients' slices in round `round`: the base order `0, 1, n-1, 2,
/// n-2, …` rotated by `round / 2`, and reversed in odd rounds.
///
/// These are the rows of a balanced Latin square (Williams' design) and their
/// reverses: over any `2n` consecutive rounds each client takes each place equally
/// often, and within a pass through the order each client follows each other one
/// equally often (twice). A slice after another client's meets what that client
/// left behind (a server whose connections sat idle, a warm cache); with a fixed
/// cyclic order one client would always meet the same neighbour. For up to three
/// clients the base order is plain `0, 1, …, n-1`.
pub fn round_order(round: usize, n: usize) -> Vec<usize> {
    let base = (0..n).map(|i| if i % 2 == 1 { i.div_ceil(2) } else { (n - i / 2) % n });
    let mut order: Vec<usize> = base.map(|k| (k + round / 2) % n).collect();
    if round % 2 == 1 {
        order.reverse();
    }
    order
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_rounds() {
        let check = |round: usize, n: usize, expected: &[usize]| {
            assert_eq!(round_order(round, n), expected, "round {round} of {n}");
        };
        check(0, 0, &[]);
        check(0, 1, &[0]);
        check(3, 1, &[0]);
        check(0, 3, &[0, 1, 2]);
        check(1, 3, &[2, 1, 0]);
        check(2, 3, &[1, 2, 0]);
        check(0, 4, &[0, 1, 3, 2]);
        check(1, 4, &[2, 3, 1, 0]);
        check(2, 4, &[1, 2, 0, 3]);
        check(0, 5, &[0, 1, 4, 2, 3]);
    }

    #[test]
    fn each_round_orders_every_client_once() {
        for n in 0..9 {
            for round in 0..2 * n {
                let mut order = round_order(round, n);
                order.sort_unstable();
                assert_eq!(order, (0..n).collect::<Vec<_>>(), "round {round} of {n}");
            }
        }
    }

    /// Over `2n` rounds (an even number), each client follows each other one equally
    /// often within a pass, and takes each place equally often.
    #[test]
    fn each_client_follows_each_other_equally_often() {
        for n in 2..9 {
            let mut follows = vec![vec![0; n]; n];
            let mut places = vec![vec![0; n]; n];
            for round in 0..2 * n {
                let order = round_order(round, n);
                for pair in order.windows(2) {
                    follows[pair[1]][pair[0]] += 1;
                }
                for (place, &client) in order.iter().enumerate() {
                    places[client][place] += 1;
                }
            }
            for (after, counts) in follows.iter().enumerate() {
                for (before, &count) in counts.iter().enumerate() {
                    let expected = if before == after { 0 } else { 2 };
                    assert_eq!(count, expected, "{n} clients: {after} after {before}");
                }
            }
            assert!(places.iter().flatten().all(|&count| count == 2), "{n} clients: {places:?}");
        }
    }
}
