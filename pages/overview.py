"""Overview page (being built)."""

import streamlit as st

st.title("Overview")
st.info("This page is being built.")
