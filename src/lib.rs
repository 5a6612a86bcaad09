//! recall
