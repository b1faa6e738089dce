"""PCF Review: permutation-consensus factuality judging."""
