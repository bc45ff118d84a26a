//! What is read from a registry without running it: static checks ([`validator`]) and the
//! architecture document ([`architecture`]).

pub mod architecture;
pub mod validator;
