#![doc = include_str!("../../docs/tutorial.md")]

include!(concat!(env!("OUT_DIR"), "/lib.rs"));
