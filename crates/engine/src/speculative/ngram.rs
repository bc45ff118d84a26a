//! Prompt lookup: drafts from the sequence's own context, no second model.
//!
//! The context's last few tokens are looked up earlier in the context; the tokens that
//! followed that occurrence are the draft. The longest match wins (a longer one is less often a
//! chance repeat), and of equally long ones the latest (the nearest repeat of a pattern).

/// Shortest match that proposes a draft: a single token repeats by chance too often.
pub const MIN_MATCH: usize = 2;
/// Longest match looked for.
pub const MAX_MATCH: usize = 8;

/// Up to `max` tokens that followed the latest earlier occurrence of the longest suffix of
/// `context` (of [`MIN_MATCH`] to [`MAX_MATCH`] tokens) found earlier in it; empty when none
/// is found.
pub fn prompt_lookup(context: &[u32], max: usize) -> Vec<u32> {
    let n = context.len();
    if max == 0 || n <= MIN_MATCH {
        return Vec::new();
    }
    let last = context[n - 1];
    // `end`: the position after an earlier occurrence's last token, so `context[end..]` is
    // what followed it; `end < n` leaves at least one token to propose.
    let mut best: Option<(usize, usize)> = None; // (match length, end)
    for end in (1..n).rev() {
        if context[end - 1] != last {
            continue;
        }
        let len = (1..=MAX_MATCH.min(end))
            .take_while(|&i| context[end - i] == context[n - i])
            .count();
        if len >= MIN_MATCH && best.is_none_or(|(l, _)| len > l) {
            best = Some((len, end));
            if len == MAX_MATCH {
                break;
            }
        }
    }
    match best {
        Some((_, end)) => context[end..n.min(end + max)].to_vec(),
        None => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drafts_what_followed_the_latest_longest_match() {
        // "a b c d e … a b" → "c d e".
        let ctx = [1, 2, 3, 4, 5, 9, 1, 2];
        assert_eq!(prompt_lookup(&ctx, 3), vec![3, 4, 5]);
        assert_eq!(prompt_lookup(&ctx, 10), vec![3, 4, 5, 9, 1, 2]);
        // Two occurrences of "1 2": the latest is taken when equally long…
        let ctx = [1, 2, 3, 7, 1, 2, 4, 8, 1, 2];
        assert_eq!(prompt_lookup(&ctx, 2), vec![4, 8]);
        // …and a longer match wins over a later one.
        let ctx = [5, 1, 2, 3, 9, 1, 2, 4, 5, 1, 2];
        assert_eq!(prompt_lookup(&ctx, 2), vec![3, 9]);
    }

    #[test]
    fn no_draft_without_a_long_enough_match() {
        assert!(prompt_lookup(&[1, 2, 3, 4], 4).is_empty());
        // A single repeated token is not enough.
        assert!(prompt_lookup(&[1, 2, 3, 1], 4).is_empty());
        assert!(prompt_lookup(&[], 4).is_empty());
        assert!(prompt_lookup(&[1, 2, 1, 2], 0).is_empty());
        // A run of one token drafts more of it (the match overlaps the suffix).
        assert_eq!(prompt_lookup(&[7, 7, 7, 7], 4), vec![7]);
    }

    proptest::proptest! {
        #[test]
        fn a_draft_continues_an_earlier_occurrence_of_the_suffix(
            context in proptest::collection::vec(0u32..4, 0..60),
            max in 0usize..10,
        ) {
            let draft = prompt_lookup(&context, max);
            proptest::prop_assert!(draft.len() <= max);
            if !draft.is_empty() {
                // Some earlier `end` has the draft after it and the context's last MIN_MATCH
                // tokens before it.
                let n = context.len();
                let found = (MIN_MATCH..n).any(|end| {
                    context[end - MIN_MATCH..end] == context[n - MIN_MATCH..]
                        && context[end..].starts_with(&draft)
                });
                proptest::prop_assert!(found, "{context:?} → {draft:?}");
            }
        }
    }
}
