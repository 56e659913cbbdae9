//! CPython's `random.Random(n).choice(seq)`, bit for bit, for the genesis
//! epoch's pool assignment.
//!
//! CPython seeds MT19937 from an integer with `init_by_array`, the key being
//! the integer's 32-bit words, least significant first. `choice` draws an index
//! with `_randbelow(len)`: `getrandbits(len.bit_length())`, redrawn while it is
//! out of range.
//!
//! Genesis seeds one generator per slot, and seeding (about 1,250 dependent
//! steps) costs far more than the one or two numbers drawn. [`choice_indices`]
//! therefore seeds [`LANES`] generators side by side, so the steps of
//! independent slots overlap and vectorize, and draws each number directly
//! from the seeded state: output `k < 227` of MT19937 depends only on state
//! words `k`, `k + 1` and `k + 397`, so no full twist is needed.

const N: usize = 624;
const M: usize = 397;
const MATRIX_A: u32 = 0x9908_b0df;
const UPPER: u32 = 0x8000_0000;
const LOWER: u32 = 0x7fff_ffff;

/// Generators seeded side by side. Each seeding step depends on the one
/// before, so many independent lanes are needed to keep the vector units busy
/// (measured on AVX-512: 16 lanes 7.2 ms, 64 lanes 1.4 ms, 128 lanes 0.9 ms for
/// 10,000 slots); the state is 624 × 128 words, 312 KiB.
pub const LANES: usize = 128;

/// `init_genrand(19650218)`, where every `init_by_array` starts.
const INIT: [u32; N] = {
    let mut mt = [0u32; N];
    mt[0] = 19_650_218;
    let mut i = 1;
    while i < N {
        mt[i] = 1_812_433_253u32.wrapping_mul(mt[i - 1] ^ (mt[i - 1] >> 30)).wrapping_add(i as u32);
        i += 1;
    }
    mt
};

fn temper(mut y: u32) -> u32 {
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c_5680;
    y ^= (y << 15) & 0xefc6_0000;
    y ^ (y >> 18)
}

fn twist_word(a: u32, b: u32, c: u32) -> u32 {
    let y = (a & UPPER) | (b & LOWER);
    c ^ (y >> 1) ^ if y & 1 == 1 { MATRIX_A } else { 0 }
}

/// A CPython-compatible MT19937, for the general case and as the reference
/// the fast path is tested against.
#[derive(Clone)]
pub struct Mt19937 {
    mt: [u32; N],
    index: usize,
}

impl std::fmt::Debug for Mt19937 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mt19937").field("index", &self.index).finish_non_exhaustive()
    }
}

impl Mt19937 {
    /// `random.Random(seed)` for a non-negative integer seed.
    pub fn from_int(seed: u64) -> Self {
        let words = if seed >> 32 == 0 { vec![seed as u32] } else { vec![seed as u32, (seed >> 32) as u32] };
        Self::from_key(&words)
    }

    /// MT19937 `init_by_array`.
    pub fn from_key(key: &[u32]) -> Self {
        let mut mt = INIT;
        let (mut i, mut j) = (1usize, 0usize);
        for _ in 0..N.max(key.len()) {
            let prev = mt[i - 1];
            mt[i] = (mt[i] ^ (prev ^ (prev >> 30)).wrapping_mul(1_664_525)).wrapping_add(key[j]).wrapping_add(j as u32);
            i += 1;
            j += 1;
            if i >= N {
                mt[0] = mt[N - 1];
                i = 1;
            }
            if j >= key.len() {
                j = 0;
            }
        }
        for _ in 0..N - 1 {
            let prev = mt[i - 1];
            mt[i] = (mt[i] ^ (prev ^ (prev >> 30)).wrapping_mul(1_566_083_941)).wrapping_sub(i as u32);
            i += 1;
            if i >= N {
                mt[0] = mt[N - 1];
                i = 1;
            }
        }
        mt[0] = UPPER;
        Self { mt, index: N }
    }

    pub fn next_u32(&mut self) -> u32 {
        if self.index >= N {
            for k in 0..N {
                self.mt[k] = twist_word(self.mt[k], self.mt[(k + 1) % N], self.mt[(k + M) % N]);
            }
            self.index = 0;
        }
        let y = self.mt[self.index];
        self.index += 1;
        temper(y)
    }

    /// `random.getrandbits(k)` for `1 <= k <= 32`.
    pub fn getrandbits(&mut self, k: u32) -> u32 {
        self.next_u32() >> (32 - k)
    }

    /// `random._randbelow(n)` for `1 <= n < 2**32`.
    pub fn randbelow(&mut self, n: u32) -> u32 {
        let k = 32 - n.leading_zeros();
        loop {
            let r = self.getrandbits(k);
            if r < n {
                return r;
            }
        }
    }
}

/// `random.Random(seed).choice(range(n))` for one seed below 2**32.
pub fn choice_index(seed: u32, n: u32) -> u32 {
    Mt19937::from_key(&[seed]).randbelow(n)
}

/// `choice_index(seed, n)` for every seed in `seeds`, written to `out`.
pub fn choice_indices(seeds: &[u32], n: u32, out: &mut Vec<u32>) {
    assert!(n > 0, "choice from an empty sequence");
    out.clear();
    out.reserve(seeds.len());
    let mut state = vec![[0u32; LANES]; N];
    for chunk in seeds.chunks(LANES) {
        let mut keys = [0u32; LANES];
        keys[..chunk.len()].copy_from_slice(chunk);
        seed_lanes(&keys, &mut state);
        for (lane, &seed) in chunk.iter().enumerate() {
            out.push(draw_from_seeded(&state, lane, seed, n));
        }
    }
}

fn draw_from_seeded(state: &[[u32; LANES]], lane: usize, seed: u32, n: u32) -> u32 {
    let k = 32 - n.leading_zeros();
    for draw in 0..N - M {
        let word = twist_word(state[draw][lane], state[draw + 1][lane], state[draw + M][lane]);
        let r = temper(word) >> (32 - k);
        if r < n {
            return r;
        }
    }
    // 227 rejections in a row: vanishingly rare, but stay exact.
    choice_index(seed, n)
}

fn seed_lanes(keys: &[u32; LANES], state: &mut [[u32; LANES]]) {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: the CPU supports AVX-512F, checked just above.
            return unsafe { seed_lanes_avx512(keys, state) };
        }
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU supports AVX2, checked just above.
            return unsafe { seed_lanes_avx2(keys, state) };
        }
    }
    seed_lanes_generic(keys, state);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn seed_lanes_avx512(keys: &[u32; LANES], state: &mut [[u32; LANES]]) {
    seed_lanes_generic(keys, state);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn seed_lanes_avx2(keys: &[u32; LANES], state: &mut [[u32; LANES]]) {
    seed_lanes_generic(keys, state);
}

/// `init_by_array(&[key])` for every lane; written so that each step is the
/// same operation on all lanes, which the compiler turns into vector code.
#[inline(always)]
fn seed_lanes_generic(keys: &[u32; LANES], state: &mut [[u32; LANES]]) {
    let state: &mut [[u32; LANES]; N] = state.try_into().expect("state has N rows");
    for (row, &init) in state.iter_mut().zip(INIT.iter()) {
        *row = [init; LANES];
    }
    // With a one-word key, `j` is always 0 and the key is added as is. The
    // index walk is the same for every lane: 1..N, wrap, 1; then 2..N, wrap, 1.
    let step1 = |state: &mut [[u32; LANES]; N], i: usize| {
        let prev = state[i - 1];
        let row = &mut state[i];
        for l in 0..LANES {
            row[l] = (row[l] ^ (prev[l] ^ (prev[l] >> 30)).wrapping_mul(1_664_525)).wrapping_add(keys[l]);
        }
    };
    for i in 1..N {
        step1(state, i);
    }
    state[0] = state[N - 1];
    step1(state, 1);
    let step2 = |state: &mut [[u32; LANES]; N], i: usize| {
        let prev = state[i - 1];
        let row = &mut state[i];
        for l in 0..LANES {
            row[l] = (row[l] ^ (prev[l] ^ (prev[l] >> 30)).wrapping_mul(1_566_083_941)).wrapping_sub(i as u32);
        }
    };
    for i in 2..N {
        step2(state, i);
    }
    state[0] = state[N - 1];
    step2(state, 1);
    state[0] = [UPPER; LANES];
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_cpython_for_known_seeds() {
        // python3 -c "import random; r=random.Random(5); print([r.getrandbits(32) for _ in range(3)])"
        let mut r = Mt19937::from_int(5);
        assert_eq!([r.next_u32(), r.next_u32(), r.next_u32()], [2_675_342_405, 1_097_127_993, 3_185_950_873]);
        // random.Random(0) and a seed wider than 32 bits.
        assert_eq!(Mt19937::from_int(0).next_u32(), 3_626_764_237);
        assert_eq!(Mt19937::from_int(1 << 40).next_u32(), 445_128_065);
    }

    #[test]
    fn lanes_agree_with_the_scalar_generator() {
        let seeds: Vec<u32> = (0..200).chain([u32::MAX, 1 << 31, 12_345_678]).collect();
        for n in [1, 2, 3, 5, 17, 100, 1000, 65_537] {
            let mut fast = Vec::new();
            choice_indices(&seeds, n, &mut fast);
            let slow: Vec<u32> = seeds.iter().map(|&s| choice_index(s, n)).collect();
            assert_eq!(fast, slow, "n = {n}");
        }
    }

    #[test]
    fn the_generic_lane_code_agrees_too() {
        let keys: [u32; LANES] = std::array::from_fn(|l| l as u32 * 7919);
        let mut state = vec![[0u32; LANES]; N];
        seed_lanes_generic(&keys, &mut state);
        for (lane, key) in keys.iter().enumerate() {
            let reference = Mt19937::from_key(&[*key]);
            let column: Vec<u32> = state.iter().map(|row| row[lane]).collect();
            assert_eq!(column, reference.mt.to_vec(), "lane {lane}");
        }
    }
}
