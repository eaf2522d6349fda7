"""`tfctl ui --web` in a real headless Chromium."""
