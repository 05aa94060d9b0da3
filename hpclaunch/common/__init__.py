"""Small pieces every layer shares: atomic writes, user-facing errors."""
