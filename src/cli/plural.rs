//! Counts in words, singular or plural as the count asks.

/// `n` and `noun`, the noun in the plural unless `n` is 1: `1 model`, `0 models`, `5 models`. The
/// nouns the command line counts form their plural with `s`.
pub(crate) fn plural(n: usize, noun: &str) -> String {
    if n == 1 { format!("1 {noun}") } else { format!("{n} {noun}s") }
}

#[cfg(test)]
mod tests {
    use super::plural;

    #[test]
    fn one_is_singular_and_every_other_count_plural() {
        assert_eq!([plural(0, "model"), plural(1, "model"), plural(2, "step")], ["0 models", "1 model", "2 steps"]);
    }
}
