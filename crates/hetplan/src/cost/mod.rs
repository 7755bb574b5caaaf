//! The analytic cost model.
