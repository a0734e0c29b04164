//! Shard choice for the large per-visitor tables (waiting tickets, tracked clients).
//!
//! A hash table doubles its storage when it fills, so right after growing it holds twice the
//! slots it uses. With equally sized shards every shard fills at the same moment: a line just
//! past a size boundary costs close to twice what one just below it does, everywhere at once.
//! Here shard `i` receives a share proportional to 2^(i/64), so shard sizes spread evenly (on a
//! log scale) over a factor of two and each grows at its own moment. At any length some shards
//! are nearly full and others just grown, and the whole costs a steady ~1.65 slots per entry
//! instead of swinging between ~1.15 and ~2.3.

/// Shards per table.
pub(crate) const SHARD_COUNT: usize = 64;

/// 2^(1/64) as a 32.32 fixed-point number.
const STEP_Q32: u64 = 4_341_736_423;

/// Lower edge of shards 1..64 on the `u32` range: `(2^(i/64) − 1) · 2^32`. Shard 0 starts at 0.
const EDGES: [u32; SHARD_COUNT - 1] = {
    let mut edges = [0u32; SHARD_COUNT - 1];
    let mut level: u64 = 1 << 32;
    let mut index = 0;
    while index < SHARD_COUNT - 1 {
        level = ((level as u128 * STEP_Q32 as u128) >> 32) as u64;
        edges[index] = (level - (1 << 32)) as u32;
        index += 1;
    }
    edges
};

/// The shard for a key whose `spread` bits are uniformly distributed (random token bytes, a
/// keyed hash): shard `i` gets a `2^(i/64)`-weighted share.
pub(crate) fn staggered(spread: u32) -> usize {
    EDGES.partition_point(|edge| *edge <= spread)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edges_rise_and_every_shard_is_reachable() {
        assert!(EDGES.windows(2).all(|pair| pair[0] < pair[1]));
        assert_eq!(staggered(0), 0);
        assert_eq!(staggered(u32::MAX), SHARD_COUNT - 1);
        for (index, edge) in EDGES.iter().enumerate() {
            assert_eq!(staggered(*edge), index + 1);
            assert_eq!(staggered(edge - 1), index);
        }
    }

    #[test]
    fn shares_double_from_the_first_shard_to_the_last() {
        let width = |shard: usize| -> f64 {
            let low = if shard == 0 { 0 } else { EDGES[shard - 1] };
            let high = EDGES.get(shard).map_or(1u64 << 32, |edge| u64::from(*edge));
            (high - u64::from(low)) as f64
        };
        for shard in 1..SHARD_COUNT {
            let ratio = width(shard) / width(shard - 1);
            assert!(
                (ratio - 2f64.powf(1.0 / 64.0)).abs() < 1e-4,
                "{shard}: {ratio}"
            );
        }
        let spread = width(SHARD_COUNT - 1) / width(0);
        assert!((spread - 2f64.powf(63.0 / 64.0)).abs() < 1e-3, "{spread}");
    }
}
