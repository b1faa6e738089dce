"""Tests mirror the modules of pcf/."""
