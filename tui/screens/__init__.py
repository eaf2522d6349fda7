"""Modal screens of the dashboard (confirmation, help)."""
