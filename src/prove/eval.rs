//! The evaluator (to come).
