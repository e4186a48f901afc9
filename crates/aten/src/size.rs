//! `Size`: a tensor dimension as torch.export states it, an integer or a linear form in the
//! graph's symbols (`16·s21 + 1`), read from sympy's printed expressions.
//!
//! A decode step's only symbol is the past length of its KV caches, and every size the graph
//! derives from it is linear in it: a cache of `s21` positions, `s21 + 1` after the append, a
//! reshape to `16·s21` values. So a size is `constant + Σ coefficient·symbol`, compared exactly;
//! an expression that is not linear (a product of symbols, `FloorDiv`, `Max`, …) is an error naming
//! it, never approximated.

use std::collections::BTreeMap;
use std::fmt;

/// A dimension: `constant + Σ terms[s]·s` over the graph's symbols.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Size {
    constant: i64,
    terms: BTreeMap<String, i64>,
}

impl Size {
    /// The size `n`.
    pub fn of(n: i64) -> Size {
        Size { constant: n, terms: BTreeMap::new() }
    }

    /// The symbol `name`.
    pub fn symbol(name: &str) -> Size {
        Size { constant: 0, terms: BTreeMap::from([(name.to_string(), 1)]) }
    }

    /// The integer it is, when it names no symbol.
    pub fn known(&self) -> Option<i64> {
        self.terms.is_empty().then_some(self.constant)
    }

    /// `self + other`, or `None` on overflow.
    pub fn plus(&self, other: &Size) -> Option<Size> {
        let mut out = self.clone();
        out.constant = out.constant.checked_add(other.constant)?;
        for (s, c) in &other.terms {
            let t = out.terms.entry(s.clone()).or_insert(0);
            *t = t.checked_add(*c)?;
        }
        out.terms.retain(|_, c| *c != 0);
        Some(out)
    }

    /// `self − other`, or `None` on overflow.
    pub fn minus(&self, other: &Size) -> Option<Size> {
        self.plus(&other.times(-1)?)
    }

    /// `k · self`, or `None` on overflow.
    pub fn times(&self, k: i64) -> Option<Size> {
        let mut terms = BTreeMap::new();
        for (s, c) in &self.terms {
            if k != 0 {
                terms.insert(s.clone(), c.checked_mul(k)?);
            }
        }
        Some(Size { constant: self.constant.checked_mul(k)?, terms })
    }

    /// `self · other` when one of them is an integer; a product of two symbolic sizes is not linear.
    pub fn product(&self, other: &Size) -> Option<Size> {
        match (self.known(), other.known()) {
            (Some(k), _) => other.times(k),
            (_, Some(k)) => self.times(k),
            _ => None,
        }
    }

    /// `self / k` when every coefficient divides exactly.
    pub fn divided(&self, k: i64) -> Option<Size> {
        if k == 0 || self.constant % k != 0 || self.terms.values().any(|c| c % k != 0) {
            return None;
        }
        let terms = self.terms.iter().map(|(s, c)| (s.clone(), c / k)).collect();
        Some(Size { constant: self.constant / k, terms })
    }

    /// Whether `self ≥ other` for every value of the symbols at least 1: their difference has no
    /// negative coefficient and is not negative with every symbol at 1.
    pub fn at_least(&self, other: &Size) -> bool {
        self.minus(other).is_some_and(|d| {
            d.terms.values().all(|&c| c >= 0)
                && d.terms.values().try_fold(d.constant, |a, &c| a.checked_add(c)).is_some_and(|v| v >= 0)
        })
    }

    /// Reads sympy's printed form of a linear expression: `Integer(n)`, `Symbol('s', …)`,
    /// `Add(a, b, …)` and `Mul(a, b, …)` with at most one symbolic factor, and `Min(a, b, …)` and
    /// `Max(a, b, …)` where one argument is the least (the greatest) for every value of the
    /// symbols, all declared `positive=True` (torch writes such a `Min` in the strides of a
    /// reshape).
    pub fn parse_sympy(text: &str) -> Result<Size, String> {
        let mut p = Parser { text, at: 0, all_positive: true };
        let size = p.expr()?;
        p.skip_space();
        if p.at != text.len() {
            return Err(format!("`{text}`: unexpected `{}` at byte {}", &text[p.at..], p.at));
        }
        Ok(size)
    }
}

impl fmt::Display for Size {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts: Vec<String> =
            self.terms.iter().map(|(s, c)| if *c == 1 { s.clone() } else { format!("{c}·{s}") }).collect();
        if self.constant != 0 || parts.is_empty() {
            parts.push(self.constant.to_string());
        }
        f.write_str(&parts.join(" + "))
    }
}

/// A recursive-descent reader of sympy's `srepr`-like printing.
struct Parser<'a> {
    text: &'a str,
    at: usize,
    /// Whether every symbol read so far is declared `positive=True`.
    all_positive: bool,
}

impl Parser<'_> {
    fn skip_space(&mut self) {
        while self.text[self.at..].starts_with(' ') {
            self.at += 1;
        }
    }

    fn eat(&mut self, s: &str) -> bool {
        self.skip_space();
        let found = self.text[self.at..].starts_with(s);
        if found {
            self.at += s.len();
        }
        found
    }

    fn name(&mut self) -> String {
        self.skip_space();
        let rest = &self.text[self.at..];
        let n = rest.find(|c: char| !c.is_ascii_alphanumeric() && c != '_').unwrap_or(rest.len());
        self.at += n;
        rest[..n].to_string()
    }

    /// The arguments of a call whose name was read, up to its `)`.
    fn args(&mut self) -> Result<Vec<Size>, String> {
        let mut out = vec![];
        loop {
            out.push(self.expr()?);
            if self.eat(")") {
                return Ok(out);
            }
            if !self.eat(",") {
                return Err(format!("`{}`: expected `,` or `)` at byte {}", self.text, self.at));
            }
        }
    }

    fn expr(&mut self) -> Result<Size, String> {
        let name = self.name();
        if !self.eat("(") {
            return Err(format!("`{}`: expected a call at byte {}", self.text, self.at));
        }
        let text = self.text;
        let overflow = || format!("`{text}`: a size overflows");
        match name.as_str() {
            "Integer" => {
                self.skip_space();
                let rest = &self.text[self.at..];
                let n = rest.find(|c: char| !c.is_ascii_digit() && c != '-').unwrap_or(rest.len());
                let value = rest[..n].parse::<i64>().map_err(|_| format!("`{}`: not an integer", self.text))?;
                self.at += n;
                if !self.eat(")") {
                    return Err(format!("`{}`: expected `)` at byte {}", self.text, self.at));
                }
                Ok(Size::of(value))
            }
            "Symbol" => {
                if !self.eat("'") {
                    return Err(format!("`{}`: expected a quoted symbol at byte {}", self.text, self.at));
                }
                let symbol = self.name();
                if !self.eat("'") {
                    return Err(format!("`{}`: expected `'` at byte {}", self.text, self.at));
                }
                // Of the assumptions (`positive=True, integer=True`) only positivity matters, to
                // order sizes in a `Min` or `Max`.
                let close = self.text[self.at..].find(')').ok_or_else(|| format!("`{}`: no `)`", self.text))?;
                self.all_positive &= self.text[self.at..self.at + close].contains("positive=True");
                self.at += close + 1;
                Ok(Size::symbol(&symbol))
            }
            "Add" => {
                let terms = self.args()?;
                terms.iter().try_fold(Size::of(0), |a, b| a.plus(b)).ok_or_else(overflow)
            }
            "Mul" => {
                let factors = self.args()?;
                factors
                    .iter()
                    .try_fold(Size::of(1), |a, b| a.product(b))
                    .ok_or_else(|| format!("`{}`: a product of symbolic sizes is not a linear size", self.text))
            }
            "Min" | "Max" => {
                let args = self.args()?;
                let extreme = |a: &Size, b: &Size| if name == "Min" { b.at_least(a) } else { a.at_least(b) };
                let found = args.iter().find(|a| args.iter().all(|b| extreme(a, b)));
                match found {
                    Some(a) if self.all_positive => Ok(a.clone()),
                    _ => Err(format!(
                        "`{text}`: no argument of `{name}` is the {} for every size",
                        if name == "Min" { "least" } else { "greatest" }
                    )),
                }
            }
            other => {
                Err(format!("`{}`: `{other}` is not a linear size (Integer, Symbol, Add, Mul, Min, Max)", self.text))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sympys_linear_sizes_read_as_linear_forms() {
        let s = Size::symbol("s21");
        assert_eq!(Size::parse_sympy("Integer(7)"), Ok(Size::of(7)));
        assert_eq!(Size::parse_sympy("Symbol('s21', positive=True, integer=True)"), Ok(s.clone()));
        let sixteen_s = Size::parse_sympy("Mul(Integer(16), Symbol('s21', positive=True, integer=True))");
        assert_eq!(sixteen_s, Ok(s.times(16).expect("small")));
        let plus_one = Size::parse_sympy("Add(Symbol('s21', positive=True, integer=True), Integer(1))");
        let plus_one = plus_one.expect("linear");
        assert_eq!(plus_one.to_string(), "s21 + 1");
        assert_eq!(plus_one.minus(&s), Some(Size::of(1)));
    }

    #[test]
    fn what_is_not_linear_is_an_error_naming_it() {
        let square = "Mul(Symbol('s21', integer=True), Symbol('s21', integer=True))";
        assert!(Size::parse_sympy(square).expect_err("not linear").contains("not a linear size"));
        let floor = "FloorDiv(Symbol('s21', integer=True), Integer(2))";
        assert!(Size::parse_sympy(floor).expect_err("not linear").contains("`FloorDiv` is not a linear size"));
        assert!(Size::parse_sympy("Integer(3) trailing").is_err());
        let neither = "Min(Symbol('s', positive=True), Integer(2))";
        assert!(Size::parse_sympy(neither).expect_err("s may be 1 or 3").contains("no argument of `Min` is the least"));
    }

    #[test]
    fn a_min_or_max_of_sizes_ordered_for_every_positive_symbol_is_the_least_or_the_greatest() {
        let s = "Symbol('s21', positive=True, integer=True)";
        let min = format!("Min(Add(Mul(Integer(8), {s}), Integer(8)), Add(Mul(Integer(16), {s}), Integer(16)))");
        assert_eq!(Size::parse_sympy(&min).map(|x| x.to_string()), Ok("8·s21 + 8".into()));
        let max = format!("Max(Integer(1), {s})");
        assert_eq!(Size::parse_sympy(&max).map(|x| x.to_string()), Ok("s21".into()));
        // Without `positive=True`, s may be 0 or negative: no order is assumed.
        let unsigned = "Min(Symbol('s', integer=True), Mul(Integer(2), Symbol('s', integer=True)))";
        assert!(Size::parse_sympy(unsigned).is_err());
    }

    #[test]
    fn sizes_divide_only_exactly() {
        let s = Size::symbol("s");
        assert_eq!(s.times(16).and_then(|x| x.divided(4)), s.times(4));
        assert_eq!(s.times(6).and_then(|x| x.divided(4)), None);
        assert_eq!(s.product(&s), None);
    }
}
