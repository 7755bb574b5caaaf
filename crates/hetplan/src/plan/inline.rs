//! The inline plan form `tp=8,pp=8,dp=1,mbs=1,gbs=64,...`.
