"""The prompt settings: prompt sets built against an index, prompt-free settings, the start token."""
