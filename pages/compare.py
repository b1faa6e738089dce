"""Compare page (being built)."""

import streamlit as st

st.title("Compare")
st.info("This page is being built.")
