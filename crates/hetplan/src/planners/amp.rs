//! AMP (Li et al., NeurIPS 2022): see the module docs once implemented.
