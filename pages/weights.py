"""Weights page (being built)."""

import streamlit as st

st.title("Weights")
st.info("This page is being built.")
