//! An in-memory store (filled in below).
