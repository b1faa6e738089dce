"""Adjudicate page (being built)."""

import streamlit as st

st.title("Adjudicate")
st.info("This page is being built.")
