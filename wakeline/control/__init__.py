"""The owner's control page (CONTRACT section 13): its part, feed, sessions and templates."""
